-- Verify better_compute:agent_api_schema on pg

BEGIN;

SELECT 1 / (pg_catalog.has_schema_privilege('bc_gateway', 'agent_api', 'USAGE'))::int;

ROLLBACK;
