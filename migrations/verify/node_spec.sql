-- Verify better_compute:node_spec on pg

BEGIN;

SELECT 'worker_api.node_spec_to_sign(uuid)'::regprocedure;
SELECT 'worker_api.node_spec_signed(uuid, bigint, jsonb)'::regprocedure;
SELECT 'node_api.spec_get(uuid, bigint)'::regprocedure;
-- (spec_observed left node_api in node_reports_verified_by_the_worker)
SELECT * FROM compute.node_specs WHERE false;

ROLLBACK;
