-- Deploy better_compute:earliest_past_horizon to pg
-- capacity_earliest answers a not_before past its search horizon with NULLs and the reason, instead
-- of building a range that runs backwards (SQLSTATE 22000, an internal error over HTTP).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.capacity_earliest(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
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

COMMIT;
