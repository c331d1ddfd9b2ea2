-- Verify better_compute:capacity_timeline_own_history on pg
-- capacity.timeline: live bookings through bookings_pool, the caller's own released ones through bookings_tenant_pool; others' released history not shown
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

-- By hand: capacity.timeline reads live bookings apart from the caller's own released ones (and no
-- longer others' released bookings).
DO $$
DECLARE
    v_src text := (SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                    WHERE p.oid = 'compute.api_capacity_timeline(uuid, jsonb)'::pg_catalog.regprocedure);
BEGIN
    IF pg_catalog.strpos(v_src, 'b.tenant_id = p_tenant_id AND b.pool_id = v_pool_id') = 0
       OR pg_catalog.strpos(v_src, '''active'', ''released''') > 0 THEN
        RAISE EXCEPTION 'compute.api_capacity_timeline still reads others'' released bookings';
    END IF;
END
$$;

ROLLBACK;
