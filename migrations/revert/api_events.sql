-- Revert better_compute:api_events from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.api_webhooks_replay(uuid, text, jsonb);
DROP FUNCTION compute.api_webhooks_delete(uuid, text, jsonb);
DROP FUNCTION compute.api_webhooks_list(uuid, jsonb);
DROP FUNCTION compute.api_webhooks_create(uuid, text, jsonb);
DROP FUNCTION compute.webhook_json(compute.webhooks);
DROP FUNCTION compute.api_audit_proof(uuid, jsonb);
DROP FUNCTION compute.api_events_list(uuid, jsonb);
DROP FUNCTION api.events(uuid, text, integer);
DROP FUNCTION compute.events_page(uuid, text, integer);

COMMIT;
