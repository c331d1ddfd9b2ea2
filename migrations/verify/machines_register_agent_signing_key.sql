-- Verify better_compute:machines_register_agent_signing_key on pg
-- machines.registerAgent takes the agent's signing key; agents answer it
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1 / count(*)::int FROM api.methods WHERE method = 'machines.registerAgent' AND input_schema -> 'properties' ? 'signing_key';

SELECT 1 / (pg_catalog.strpos(pg_catalog.pg_get_functiondef('compute.api_machine_agent_json(compute.site_agents)'::regprocedure), 'signing_key') > 0)::int;

ROLLBACK;
