-- Verify better_compute:earliest_past_horizon on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.capacity_earliest(uuid, text, integer, interval, timestamptz)'::regprocedure)
            LIKE '%past the search horizon%')::integer;

ROLLBACK;
