-- Verify better_compute:inventory_gpu_elsewhere on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.node_register(uuid, text, jsonb)'::regprocedure)
            NOT LIKE '%is registered on another node%')::integer;

ROLLBACK;
