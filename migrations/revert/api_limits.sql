-- Revert better_compute:api_limits from pg

BEGIN;

DELETE FROM compute.limits WHERE name IN ('admission_seconds', 'admission_retention_seconds', 'api_list_rows', 'join_token_ttl_seconds', 'join_token_ttl_seconds_max');

COMMIT;
