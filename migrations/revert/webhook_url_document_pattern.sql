-- Revert better_compute:webhook_url_document_pattern from pg

BEGIN;

SET LOCAL ROLE bc_owner;

UPDATE api.methods
   SET input_schema = pg_catalog.jsonb_set(input_schema, '{properties,url,pattern}', '"^https?://[^\\s]+$"')
 WHERE method = 'webhooks.create';

COMMIT;
