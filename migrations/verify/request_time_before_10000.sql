-- Verify better_compute:request_time_before_10000 on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.request_timestamp(jsonb, text, boolean)'::regprocedure) LIKE '%10000-01-01%')::integer;

ROLLBACK;
