-- Verify better_compute:capacity_queries on pg

BEGIN;

SELECT 'compute.capacity_free(uuid, text, timestamptz, timestamptz)'::regprocedure,
       'compute.capacity_earliest(uuid, text, integer, interval, timestamptz)'::regprocedure;

ROLLBACK;
