-- Verify better_compute:node_spec on pg

BEGIN;

SELECT 'worker_api.node_spec_to_sign(uuid)'::regprocedure;
SELECT 'worker_api.node_spec_signed(uuid, bigint, jsonb)'::regprocedure;
SELECT 'node_api.spec_get(uuid, bigint)'::regprocedure;
SELECT 'node_api.spec_observed(uuid, bigint, bigint, jsonb)'::regprocedure;
SELECT * FROM compute.node_specs WHERE false;

ROLLBACK;
