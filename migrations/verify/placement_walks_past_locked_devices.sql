-- Verify better_compute:placement_walks_past_locked_devices on pg

BEGIN;

-- What changed shows only under concurrent sessions (tests/test_placement_young_fleet.py): a
-- placement that loses a device chooses again from the candidates left and walks on, with no cap on
-- attempts.
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.place(uuid, text, integer, tstzrange, boolean)'::regprocedure)
            LIKE '%v_lost%')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.place(uuid, text, integer, tstzrange, boolean)'::regprocedure)
            NOT LIKE '%1..3 LOOP%')::integer;

ROLLBACK;
