-- Verify better_compute:usage on pg

BEGIN;

SELECT reservation_id, window_start, gpu_seconds, ledger_key, sent_at FROM compute.usage_windows WHERE false;
SELECT idempotency_key, quantity FROM compute.ledger_entries WHERE false;
SELECT 'compute.usage_compute()'::regprocedure, 'worker_api.usage_unsent(integer)'::regprocedure;

ROLLBACK;
