-- Verify better_compute:join_tokens on pg

BEGIN;

SELECT 'compute.join_token_json(compute.join_tokens)'::regprocedure;
SELECT 'compute.api_join_tokens_create(uuid, text, jsonb)'::regprocedure;
SELECT 'compute.api_join_tokens_list(uuid, jsonb)'::regprocedure;
SELECT 'compute.api_join_tokens_revoke(uuid, text, jsonb)'::regprocedure;
SELECT * FROM compute.join_tokens WHERE false;

ROLLBACK;
