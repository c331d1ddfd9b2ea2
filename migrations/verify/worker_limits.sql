-- Verify better_compute:worker_limits on pg

BEGIN;

SELECT 1 / (count(*) = 14)::int FROM compute.limits WHERE name IN ('work_attempts', 'work_claim_batch', 'work_backoff_base_seconds', 'work_backoff_cap_seconds', 'outbox_read_batch', 'outbox_retention_seconds', 'webhook_attempts', 'webhook_backoff_base_seconds', 'webhook_backoff_cap_seconds', 'webhook_timeout_seconds', 'webhooks_per_tenant', 'usage_export_batch', 'webhook_delivery_batch', 'work_done_retention_seconds');

ROLLBACK;
