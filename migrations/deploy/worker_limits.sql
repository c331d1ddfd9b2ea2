-- Deploy better_compute:worker_limits to pg
-- The bounds of the work queue, outbox, webhooks and usage export (sql/030_limits.sql lists them all).

BEGIN;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('work_attempts',                    10, 'count',   'Attempts of one work item before it is dead.'),
    ('work_claim_batch',                100, 'count',   'Work items one claim may take.'),
    ('work_backoff_base_seconds',         1, 'seconds', 'First retry delay of failed work (doubles per attempt, 50-100 % jitter).'),
    ('work_backoff_cap_seconds',        600, 'seconds', 'Longest retry delay of failed work.'),
    ('outbox_read_batch',              1000, 'count',   'Events one outbox read returns.'),
    ('outbox_retention_seconds',     604800, 'seconds', 'How long delivered events stay in the outbox (7 days).'),
    ('webhook_attempts',                 25, 'count',   'Delivery attempts before a webhook delivery is dead-lettered.'),
    ('webhook_backoff_base_seconds',     30, 'seconds', 'First webhook retry delay (doubles per attempt).'),
    ('webhook_backoff_cap_seconds',    3600, 'seconds', 'Longest webhook retry delay.'),
    ('webhook_timeout_seconds',          10, 'seconds', 'How long one webhook POST may take.'),
    ('webhooks_per_tenant',              20, 'count',   'Webhook subscriptions of one tenant.'),
    ('usage_export_batch',              500, 'count',   'Usage windows one export sends.'),
    ('webhook_delivery_batch',          100, 'count',   'Deliveries of one webhook one run sends.'),
    ('work_done_retention_seconds',   86400, 'seconds', 'How long done work items are kept (1 day).');

COMMIT;
