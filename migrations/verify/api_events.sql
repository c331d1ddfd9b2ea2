-- Verify better_compute:api_events on pg

BEGIN;

SELECT 'compute.events_page(uuid, text, integer)'::regprocedure;
SELECT 'api.events(uuid, text, integer)'::regprocedure;
SELECT 'compute.api_events_list(uuid, jsonb)'::regprocedure;
SELECT 'compute.api_audit_proof(uuid, jsonb)'::regprocedure;
SELECT 'compute.webhook_json(compute.webhooks)'::regprocedure;
SELECT 'compute.api_webhooks_create(uuid, text, jsonb)'::regprocedure;

ROLLBACK;
