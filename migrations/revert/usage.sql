-- Revert better_compute:usage from pg

BEGIN;

DROP VIEW ops.usage;
DROP FUNCTION worker_api.ledger_record_local(text, uuid, text, numeric, jsonb);
DROP FUNCTION worker_api.usage_mark_sent(text[]);
DROP FUNCTION worker_api.usage_unsent(integer);
DROP FUNCTION worker_api.usage_compute();
DROP FUNCTION compute.ledger_record_local(text, uuid, text, numeric, jsonb);
DROP FUNCTION compute.usage_compute();
DROP TABLE compute.ledger_entries;
DROP TABLE compute.usage_progress;
DROP TABLE compute.usage_windows;

COMMIT;
