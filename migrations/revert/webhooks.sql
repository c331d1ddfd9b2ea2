-- Revert better_compute:webhooks from pg

BEGIN;

DROP FUNCTION ops.webhook_replay(uuid);
DROP VIEW ops.webhook_dead_letters;
DROP FUNCTION worker_api.webhook_timeout_seconds();
DROP FUNCTION worker_api.webhook_next_due_seconds(uuid);
DROP FUNCTION worker_api.webhook_result(bigint, bigint, uuid, boolean, integer, text);
DROP FUNCTION worker_api.webhook_due(bigint, bigint, integer);
DROP FUNCTION worker_api.webhooks_fan_out();
DROP FUNCTION worker_api.outbox_prune();
DROP FUNCTION compute.outbox_prune();
DROP FUNCTION compute.webhook_replay(uuid);
DROP FUNCTION compute.webhook_next_due(uuid);
DROP FUNCTION compute.webhook_result(bigint, bigint, uuid, boolean, integer, text);
DROP FUNCTION compute.webhook_due(bigint, bigint, integer);
DROP TYPE compute.webhook_delivery;
DROP FUNCTION compute.webhooks_fan_out();
DROP FUNCTION compute.webhook_matches(text[], text);
DROP FUNCTION compute.webhook_create(uuid, text, text, text[]);
DROP TABLE compute.webhook_deliveries;
DROP TABLE compute.webhooks;
DELETE FROM compute.outbox_cursors WHERE consumer = 'webhooks';

COMMIT;
