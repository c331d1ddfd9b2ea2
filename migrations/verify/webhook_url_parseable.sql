-- Verify better_compute:webhook_url_parseable on pg

BEGIN;

SELECT 1 / (NOT compute.webhook_url_valid('http://[x'))::integer;
SELECT 1 / (pg_catalog.pg_get_constraintdef((SELECT c.oid FROM pg_catalog.pg_constraint AS c
                                              WHERE c.conname = 'webhooks_url_check'
                                                AND c.conrelid = 'compute.webhooks'::regclass)) LIKE '%webhook_url_valid(%')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.webhook_create(uuid, text, text, text[], uuid)'::regprocedure) LIKE '%webhook_url_valid(%')::integer;

ROLLBACK;
