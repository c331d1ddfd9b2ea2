-- Quota enforcement (docs/architecture.md §5): inside the booking transaction, correct under concurrency.
-- The quota rows that apply (the tenant's for the pool, and the project's if any) are locked FOR
-- UPDATE in quota_id order before anything is counted, so two requests of one tenant in one pool
-- are counted one after the other and can never both pass the last unit.
--   max_atoms            peak number of the tenant's live atoms at any instant of the window
--   gpu_hours_per_month  per calendar month (UTC): GPU-hours of live and released bookings, past and
--                        future, plus the request's share of that month
-- Windows are compared through lower()/upper() so that both counts use the btree index
-- bookings_tenant_pool (tenant, pool, end of window): a few pages per tenant, however long the history.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.month_hours(p_during tstzrange, p_month_start timestamptz)
RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $$
    -- Hours of p_during inside the calendar month starting at p_month_start (UTC); one expression
    -- (an empty intersection has NULL bounds), so the planner inlines it.
    SELECT coalesce(extract(epoch FROM
               upper(p_during * tstzrange(p_month_start, (p_month_start AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'))
             - lower(p_during * tstzrange(p_month_start, (p_month_start AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'))) / 3600, 0)
$$;
COMMENT ON FUNCTION compute.month_hours(tstzrange, timestamptz) IS 'Hours of a window inside one UTC calendar month.';

CREATE FUNCTION compute.quota_check(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_during tstzrange,
                                    p_atoms integer, p_gpu_fraction numeric, p_excluding uuid DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: quota rows FOR UPDATE in quota_id order (before any device lock).
DECLARE
    v_quota compute.quotas;
    v_scope text;
    v_peak  bigint;
    v_month timestamptz;
    v_used  numeric;
    v_asked numeric;
BEGIN
    FOR v_quota IN
        SELECT * FROM compute.quotas AS q
         WHERE q.tenant_id = p_tenant_id AND q.pool_id = p_pool_id
           AND (q.project_id IS NULL OR q.project_id = p_project_id)
         ORDER BY q.quota_id
           FOR UPDATE
    LOOP
        v_scope := CASE WHEN v_quota.project_id IS NULL THEN 'tenant' ELSE 'project' END;

        -- Concurrent atoms: the peak is reached at the window's start or at a booking's start within it.
        IF v_quota.max_atoms IS NOT NULL THEN
            SELECT coalesce(max(held), 0) INTO v_peak
              FROM (SELECT t, (SELECT count(*) FROM compute.bookings AS b
                                WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                                  AND b.state = 'held' AND upper(b.during) > t AND lower(b.during) <= t
                                  AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                                  AND b.reservation_id IS DISTINCT FROM p_excluding) AS held
                      FROM (SELECT lower(p_during) AS t
                            UNION
                            SELECT lower(b.during) FROM compute.bookings AS b
                             WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                               AND b.state = 'held' AND upper(b.during) > lower(p_during)
                               AND lower(b.during) >= lower(p_during) AND lower(b.during) < upper(p_during)) AS instants) AS counts;
            IF v_peak + p_atoms > v_quota.max_atoms THEN
                PERFORM compute.raise_error('QUOTA_EXCEEDED',
                    pg_catalog.format('%s quota of %s concurrent atoms in this pool would be exceeded', v_scope, v_quota.max_atoms),
                    pg_catalog.format('%s atoms remain during the window (%s held at the peak, %s asked); release some or ask for fewer.',
                                      greatest(v_quota.max_atoms - v_peak, 0), v_peak, p_atoms));
            END IF;
        END IF;

        -- GPU-hours per calendar month, for each month the window touches.
        IF v_quota.gpu_hours_per_month IS NOT NULL THEN
            FOR v_month IN
                SELECT m AT TIME ZONE 'UTC'
                  FROM pg_catalog.generate_series(date_trunc('month', lower(p_during) AT TIME ZONE 'UTC'),
                                                  date_trunc('month', upper(p_during) AT TIME ZONE 'UTC'), interval '1 month') AS m
            LOOP
                v_asked := p_gpu_fraction * compute.month_hours(p_during, v_month);
                CONTINUE WHEN v_asked = 0;
                SELECT coalesce(sum(b.gpu_fraction * compute.month_hours(b.during, v_month)), 0) INTO v_used
                  FROM compute.bookings AS b
                 WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                   AND b.state IN ('held', 'released')
                   AND upper(b.during) > v_month AND lower(b.during) < (v_month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'
                   AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                   AND b.reservation_id IS DISTINCT FROM p_excluding;
                IF v_used + v_asked > v_quota.gpu_hours_per_month THEN
                    PERFORM compute.raise_error('QUOTA_EXCEEDED',
                        pg_catalog.format('%s quota of %s GPU-hours in %s would be exceeded', v_scope,
                                          v_quota.gpu_hours_per_month, pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM')),
                        pg_catalog.format('%s GPU-hours remain in %s (%s used or booked, %s asked); shorten the window or ask for less.',
                                          round(greatest(v_quota.gpu_hours_per_month - v_used, 0), 3),
                                          pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM'), round(v_used, 3), round(v_asked, 3)));
                END IF;
            END LOOP;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION compute.quota_check(uuid, uuid, uuid, tstzrange, integer, numeric, uuid) IS
    'QUOTA_EXCEEDED (remaining amount in the HINT) unless the request fits every quota that applies; locks those quota rows.';
