-- Revert better_compute:join_tokens from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.api_join_tokens_revoke(uuid, text, jsonb);
DROP FUNCTION compute.api_join_tokens_list(uuid, jsonb);
DROP FUNCTION compute.api_join_tokens_create(uuid, text, jsonb);
DROP FUNCTION compute.join_token_json(compute.join_tokens);
DROP TABLE compute.join_tokens;

COMMIT;
