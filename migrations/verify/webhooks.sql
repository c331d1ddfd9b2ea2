-- Verify better_compute:webhooks on pg

BEGIN;

SELECT webhook_id, tenant_id, url, secret, event_types FROM compute.webhooks WHERE false;
SELECT delivery_id, state, attempts, next_attempt_at FROM compute.webhook_deliveries WHERE false;
SELECT 'compute.webhooks_fan_out()'::regprocedure, 'worker_api.webhook_result(bigint, bigint, uuid, boolean, integer, text)'::regprocedure,
       'ops.webhook_replay(uuid)'::regprocedure, 'compute.outbox_prune()'::regprocedure,
       'worker_api.webhook_timeout_seconds()'::regprocedure;

ROLLBACK;
