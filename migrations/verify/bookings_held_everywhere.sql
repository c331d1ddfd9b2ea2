-- Verify better_compute:bookings_held_everywhere on pg
-- ops.devices, compute.fleet_metrics and the machines' reservation checks read a live booking as held (bookings are written once as held since bookings_held)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;
-- By hand: the readers this change rewrites ask for held bookings, and reserve_hold places
-- bare_metal requests on whole machines.
DO $$
DECLARE
    v_def text;
BEGIN
    FOR v_def IN
        SELECT pg_catalog.pg_get_viewdef('ops.devices'::pg_catalog.regclass)
        UNION ALL
        SELECT p.prosrc FROM pg_catalog.pg_proc AS p
         WHERE p.oid IN ('compute.fleet_metrics()'::pg_catalog.regprocedure,
                         'compute.machine_operator_move(text, text, text)'::pg_catalog.regprocedure)
    LOOP
        IF pg_catalog.strpos(v_def, '''provisional''') > 0 THEN
            RAISE EXCEPTION 'a reader of bookings still asks for provisional or active ones: %', pg_catalog.left(v_def, 80);
        END IF;
    END LOOP;
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.machine_reservation_ended(compute.machines)'::pg_catalog.regprocedure),
                         'b.state IN (''held'', ''released'')') = 0 THEN
        RAISE EXCEPTION 'compute.machine_reservation_ended still asks for active bookings';
    END IF;
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.reserve_hold(jsonb)'::pg_catalog.regprocedure), 'place_machines') = 0 THEN
        RAISE EXCEPTION 'compute.reserve_hold does not place bare_metal requests on whole machines';
    END IF;
END
$$;

ROLLBACK;
