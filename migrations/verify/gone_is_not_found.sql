-- Verify better_compute:gone_is_not_found on pg

BEGIN;

DO $$
BEGIN
    PERFORM compute.api_quotas_get(pg_catalog.gen_random_uuid(),
        pg_catalog.jsonb_build_object('pool_id', pg_catalog.gen_random_uuid(), 'project_id', pg_catalog.gen_random_uuid()));
    PERFORM compute.raise_error('INVALID_ARGUMENT', 'quotas.get answered for a project the tenant does not have', 'Deploy gone_is_not_found.');
EXCEPTION WHEN SQLSTATE 'BC404' THEN
    NULL;
END
$$;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.api_webhooks_replay(uuid, text, jsonb)'::regprocedure) LIKE '%was deleted%')::integer;

ROLLBACK;
