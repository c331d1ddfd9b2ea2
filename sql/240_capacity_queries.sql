-- Capacity queries (docs/architecture.md §6): "what is free in pool P during W" and "when is the earliest window
-- for N atoms of shape S". Atoms of one shape on one GPU never overlap, so free atoms can be counted.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamptz, p_end timestamptz)
RETURNS TABLE (node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    IF p_end <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the window ended at %s', p_end),
            'Ask for a window that ends after now: what is free can still be booked.');
    END IF;
    PERFORM compute.pool_get(p_pool_id);
    -- The atoms placement may give (compute.placeable_atoms) of the shape, valid for the whole window,
    -- whose busy windows (kept by the bookings triggers, as placement reads them) leave it free: one
    -- walk of the pool's atoms of the shape, never the bookings, whose table grows with the pool's
    -- history. A window's past part cannot be booked and is not asked about (the summaries hold no past).
    RETURN QUERY
    WITH free AS (
        SELECT s.node_id, s.atom_id, s.device_index, s.slices, s.slot
          FROM compute.placeable_atoms AS s
         WHERE s.pool_id = p_pool_id AND s.shape = p_shape
           AND lower(s.valid) <= p_start AND (upper_inf(s.valid) OR upper(s.valid) >= p_end)
           AND NOT (s.busy && tstzrange(greatest(p_start, v_now), p_end))
    ), per_node AS (
        SELECT f.node_id, count(*)::integer AS free_atoms,
               pg_catalog.array_agg(f.atom_id ORDER BY f.device_index, f.slices, f.slot) AS atom_ids
          FROM free AS f GROUP BY f.node_id
    )
    SELECT p.node_id, n.name, p.free_atoms, p.atom_ids
      FROM per_node AS p JOIN compute.nodes AS n ON n.node_id = p.node_id
     ORDER BY n.rank;
END
$$;
COMMENT ON FUNCTION compute.capacity_free(uuid, text, timestamptz, timestamptz) IS 'Atoms of a shape free for the whole window, per node.';

CREATE FUNCTION compute.capacity_earliest_start(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
                                                p_from timestamptz, p_horizon timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    -- One sweep: for each schedulable atom of the shape, its free gaps between live bookings (of
    -- any shape: a whole-GPU booking blocks its MIG atoms) within its validity; a gap admits starts
    -- in [gap start, gap end - duration]; a running count over those intervals finds the first
    -- instant at which p_count atoms admit a start.
    WITH atoms AS (
        SELECT a.atom_id, a.device_id, a.slices, a.shares,
               greatest(lower(a.valid), p_from) AS valid_from, coalesce(upper(a.valid), 'infinity') AS valid_to
          FROM compute.atoms AS a
         WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND a.valid && tstzrange(p_from, p_horizon + p_duration)
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
    ), busy AS (
        SELECT a.atom_id, lower(b.during) AS busy_from, upper(b.during) AS busy_to
          FROM atoms AS a
          JOIN compute.bookings AS b ON b.device_id = a.device_id AND b.slices && a.slices AND b.shares && a.shares
         WHERE b.pool_id = p_pool_id AND b.state = 'held' AND b.during && tstzrange(p_from, p_horizon + p_duration)
    ), edges AS (
        SELECT b.atom_id, b.busy_from,
               max(b.busy_to) OVER (PARTITION BY b.atom_id ORDER BY b.busy_from ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prior_end
          FROM busy AS b
    ), gaps AS (
        SELECT e.atom_id, greatest(a.valid_from, coalesce(e.prior_end, a.valid_from)) AS gap_from, least(e.busy_from, a.valid_to) AS gap_to
          FROM edges AS e JOIN atoms AS a ON a.atom_id = e.atom_id
        UNION ALL
        SELECT a.atom_id, greatest(a.valid_from, coalesce(max(b.busy_to), a.valid_from)), a.valid_to
          FROM atoms AS a LEFT JOIN busy AS b ON b.atom_id = a.atom_id
         GROUP BY a.atom_id, a.valid_from, a.valid_to
    ), changes AS (
        SELECT g.gap_from AS t, 1 AS delta FROM gaps AS g WHERE g.gap_to >= g.gap_from + p_duration
        UNION ALL
        SELECT g.gap_to - p_duration, -1 FROM gaps AS g WHERE g.gap_to >= g.gap_from + p_duration AND g.gap_to <> 'infinity'
    ), running AS (
        SELECT c.t, sum(c.delta) OVER (ORDER BY c.t, c.delta DESC ROWS UNBOUNDED PRECEDING) AS admitting FROM changes AS c
    )
    SELECT min(r.t) FROM running AS r WHERE r.admitting >= p_count AND r.t <= p_horizon
$$;
COMMENT ON FUNCTION compute.capacity_earliest_start(uuid, text, integer, interval, timestamptz, timestamptz) IS
    'The first instant in [p_from, p_horizon] at which p_count atoms of the shape are free for p_duration, or NULL.';

CREATE FUNCTION compute.capacity_earliest(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
                                          p_not_before timestamptz DEFAULT NULL)
RETURNS TABLE (start_at timestamptz, end_at timestamptz, reason text)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_from    timestamptz := greatest(coalesce(p_not_before, compute.compute_now()), compute.compute_now());
    v_horizon timestamptz := compute.compute_now() + compute.limit('capacity_search_horizon_seconds') * interval '1 second';
    v_total   integer;
    v_start   timestamptz;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_duration IS NULL OR p_duration <= interval '0' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_earliest needs a positive count and duration', 'Pass count >= 1 and a positive interval.');
    END IF;
    -- A search that would start past its horizon has nothing to search (and no range to build).
    IF v_from > v_horizon THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
            pg_catalog.format('not_before %s is past the search horizon %s (limit capacity_search_horizon_seconds); ask again nearer the time',
                              v_from, v_horizon);
        RETURN;
    END IF;
    -- Too few atoms of the shape at all (valid for a whole p_duration within the search, on nodes without flags).
    SELECT count(*) INTO v_total FROM compute.atoms AS a
     WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND a.valid && tstzrange(v_from, v_horizon + p_duration)
       AND (upper_inf(a.valid) OR upper(a.valid) - greatest(lower(a.valid), v_from) >= p_duration)
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id);
    IF v_total < p_count THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
            pg_catalog.format('the pool has only %s schedulable atoms of shape %s, fewer than %s', v_total, p_shape, p_count);
        RETURN;
    END IF;
    v_start := compute.capacity_earliest_start(p_pool_id, p_shape, p_count, p_duration, v_from, v_horizon);
    IF v_start IS NULL THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
            pg_catalog.format('no window of %s for %s atoms of shape %s starts before %s (search horizon)', p_duration, p_count, p_shape, v_horizon);
        RETURN;
    END IF;
    RETURN QUERY SELECT v_start, v_start + p_duration, NULL::text;
END
$$;
COMMENT ON FUNCTION compute.capacity_earliest(uuid, text, integer, interval, timestamptz) IS
    'Earliest [start, end) when count atoms of a shape are free for duration, or NULLs and the reason.';
