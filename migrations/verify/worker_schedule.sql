-- Verify better_compute:worker_schedule on pg

BEGIN;

SELECT 1 / (count(*) = 7)::int FROM compute.work_periodic
 WHERE kind IN ('reservations.expire', 'nodes.drains', 'outbox.fan_out', 'outbox.prune', 'usage.export', 'audit.checkpoint', 'work.prune');
SELECT 'worker_api.reservations_expire()'::regprocedure, 'worker_api.node_drains_complete()'::regprocedure;

ROLLBACK;
