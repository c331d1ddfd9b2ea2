-- Revert better_compute:worker_schedule from pg

BEGIN;

DROP FUNCTION worker_api.node_drains_complete();
DROP FUNCTION worker_api.reservations_expire();
DELETE FROM compute.work_periodic
 WHERE kind IN ('reservations.expire', 'nodes.drains', 'outbox.fan_out', 'outbox.prune', 'usage.export', 'audit.checkpoint', 'work.prune');

COMMIT;
