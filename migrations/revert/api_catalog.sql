-- Revert better_compute:api_catalog from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.list_limit(jsonb);
DROP FUNCTION compute.input_integer(jsonb, text, boolean);
DROP FUNCTION compute.input_text(jsonb, text, boolean);
DROP FUNCTION compute.input_uuid(jsonb, text, boolean);
DROP FUNCTION compute.input_check(jsonb, jsonb);
DROP FUNCTION compute.method_get(text);
DROP FUNCTION api.catalog();
DROP TABLE api.methods;

COMMIT;
