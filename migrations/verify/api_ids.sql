-- Verify better_compute:api_ids on pg

BEGIN;

SELECT 'compute.pool_create(uuid, text, text, text, uuid)'::regprocedure, 'compute.project_create(uuid, text, uuid)'::regprocedure, 'compute.offering_create(uuid, text, integer, interval, text, uuid)'::regprocedure, 'compute.webhook_create(uuid, text, text, text[], uuid)'::regprocedure;

ROLLBACK;
