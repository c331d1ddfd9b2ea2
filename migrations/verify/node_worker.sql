-- Verify better_compute:node_worker on pg

BEGIN;

SELECT 'worker_api.node_specs_tick()'::regprocedure;
SELECT 'worker_api.node_specs_resend()'::regprocedure;

ROLLBACK;
