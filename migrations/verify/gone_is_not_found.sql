-- Verify better_compute:gone_is_not_found on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.api_quotas_get(uuid, jsonb)'::regprocedure) LIKE '%NOT_FOUND%')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.api_webhooks_replay(uuid, text, jsonb)'::regprocedure) LIKE '%was deleted%')::integer;

ROLLBACK;
