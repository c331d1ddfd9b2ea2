-- Deploy better_compute:capacity_queries to pg
-- Snapshot of sql/240_capacity_queries.sql when this change was planned.

BEGIN;

-- Capacity queries (DESIGN §6): "what is free in pool P during W" and "when is the earliest window
-- for N atoms of shape S". Atoms of one shape on one GPU never overlap, so free atoms can be counted.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamptz, p_end timestamptz)
RETURNS TABLE (node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Pass an existing pool.');
    END IF;
    -- Busy atoms are found from the bookings that overlap the window (one index scan), then the
    -- schedulable atoms of the shape minus those: no per-atom probe.
    RETURN QUERY
    WITH busy AS (
        SELECT DISTINCT a.atom_id
          FROM compute.bookings AS b
          JOIN compute.atoms AS a ON a.device_id = b.device_id AND a.slices && b.slices AND a.shares && b.shares
         WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active') AND b.during && tstzrange(p_start, p_end)
           AND a.shape = p_shape
    )
    SELECT a.node_id, n.name, count(*)::integer, pg_catalog.array_agg(a.atom_id ORDER BY a.device_index, a.slices, a.slot)
      FROM compute.atoms AS a
      JOIN compute.nodes AS n ON n.node_id = a.node_id
     WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND compute.atom_is_schedulable(a, tstzrange(p_start, p_end))
       AND a.atom_id NOT IN (SELECT busy.atom_id FROM busy)
     GROUP BY a.node_id, n.name, n.rank
     ORDER BY n.rank;
END
$$;
COMMENT ON FUNCTION compute.capacity_free(uuid, text, timestamptz, timestamptz) IS 'Atoms of a shape free for the whole window, per node.';

CREATE FUNCTION compute.capacity_earliest(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
                                          p_not_before timestamptz DEFAULT NULL)
RETURNS TABLE (start_at timestamptz, end_at timestamptz, reason text)
LANGUAGE plpgsql STABLE
AS $$
-- Candidate starts are not_before and every instant at which an atom of the shape becomes free
-- (a booking's end) or valid (a layout change), up to the search horizon; the first candidate with
-- p_count atoms free for p_duration wins. Bounded by limit capacity_search_checks.
DECLARE
    v_from    timestamptz := greatest(coalesce(p_not_before, compute.compute_now()), compute.compute_now());
    v_horizon timestamptz := compute.compute_now() + compute.limit('capacity_search_horizon_seconds') * interval '1 second';
    v_total   integer;
    v_t       timestamptz;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_duration IS NULL OR p_duration <= interval '0' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_earliest needs a positive count and duration', 'Pass count >= 1 and a positive interval.');
    END IF;
    SELECT count(*) INTO v_total FROM compute.atoms AS a
     WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND upper_inf(a.valid)
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id);
    IF v_total < p_count THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
            pg_catalog.format('the pool has only %s schedulable atoms of shape %s, fewer than %s', v_total, p_shape, p_count);
        RETURN;
    END IF;
    FOR v_t IN
        SELECT t FROM (
            SELECT v_from AS t
            UNION
            SELECT upper(b.during) FROM compute.bookings AS b
             WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active')
               AND upper(b.during) > v_from AND upper(b.during) <= v_horizon
            UNION
            SELECT lower(a.valid) FROM compute.atoms AS a
             WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND lower(a.valid) > v_from AND lower(a.valid) <= v_horizon
        ) AS candidates
        ORDER BY t
        LIMIT compute.limit('capacity_search_checks')
    LOOP
        IF (SELECT coalesce(sum(f.free_atoms), 0) FROM compute.capacity_free(p_pool_id, p_shape, v_t, v_t + p_duration) AS f) >= p_count THEN
            RETURN QUERY SELECT v_t, v_t + p_duration, NULL::text;
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
        pg_catalog.format('no window of %s for %s atoms of shape %s starts before %s (search horizon)', p_duration, p_count, p_shape, v_horizon);
END
$$;
COMMENT ON FUNCTION compute.capacity_earliest(uuid, text, integer, interval, timestamptz) IS
    'Earliest [start, end) when count atoms of a shape are free for duration, or NULLs and the reason.';

COMMIT;
