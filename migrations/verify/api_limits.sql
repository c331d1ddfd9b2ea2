-- Verify better_compute:api_limits on pg

BEGIN;

SELECT 1/(count(*) = 5)::integer FROM compute.limits WHERE name IN ('admission_seconds', 'admission_retention_seconds', 'api_list_rows', 'join_token_ttl_seconds', 'join_token_ttl_seconds_max');

ROLLBACK;
