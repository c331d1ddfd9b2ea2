-- Verify better_compute:timeline_reads_held on pg
-- capacity.timeline reads a live booking as held and shows a booking's state as its reservation makes it (compute.booking_state)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;
-- By hand: capacity.timeline reads live bookings as held and shows their state through
-- compute.booking_state.
DO $$
DECLARE
    v_src text := (SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                    WHERE p.oid = 'compute.api_capacity_timeline(uuid, jsonb)'::pg_catalog.regprocedure);
BEGIN
    IF pg_catalog.strpos(v_src, 'b.state = ''held''') = 0
       OR pg_catalog.strpos(v_src, 'compute.booking_state(b.state, r.state)') = 0 THEN
        RAISE EXCEPTION 'compute.api_capacity_timeline still reads provisional and active booking states';
    END IF;
END
$$;

ROLLBACK;
