-- Verify better_compute:placement_and_booking_run_generic_plans on pg
-- compute.place and compute.reserve_hold run generic plans: the device lock, the recheck and the bookings INSERT were planned on every admission
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

-- By hand: compute.place and compute.reserve_hold run generic plans.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p
                WHERE p.oid IN ('compute.place(uuid,text,integer,tstzrange,boolean)'::pg_catalog.regprocedure,
                                'compute.reserve_hold(jsonb)'::pg_catalog.regprocedure)
                  AND NOT coalesce('plan_cache_mode=force_generic_plan' = ANY (p.proconfig), false)) THEN
        RAISE EXCEPTION 'compute.place or compute.reserve_hold plans its statements per call';
    END IF;
END
$$;

ROLLBACK;
