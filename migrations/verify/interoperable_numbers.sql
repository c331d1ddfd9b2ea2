-- Verify better_compute:interoperable_numbers on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.command_enqueue(uuid, text, jsonb, text, uuid)'::regprocedure) LIKE '%9007199254740991%')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.quota_set(uuid, uuid, uuid, integer, numeric)'::regprocedure) LIKE '%1e12%')::integer;

ROLLBACK;
