-- Verify better_compute:bmc_results_signed_by_the_agent on pg
-- BMC results signed by the site agent's Ed25519 key: relayed by site_api.op_result(agent, envelope), verified by a worker (bmc_ops.result) before they are applied; machines.registerAgent / ops.site_agent_register take the signing key
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.bmc_op_result_append(uuid,jsonb)'::regprocedure;

SELECT 'compute.bmc_op_result_check(text,jsonb)'::regprocedure;

SELECT 'compute.bmc_op_result_rejected(bigint,jsonb,text)'::regprocedure;

SELECT 'compute.bmc_op_result_to_verify(bigint)'::regprocedure;

SELECT 'compute.bmc_op_result_verified(bigint,jsonb,bytea)'::regprocedure;

SELECT 'compute.site_agent_register(uuid,uuid,text,bytea,bytea)'::regprocedure;

SELECT 'compute.site_agent_signing_key_set(uuid,bytea)'::regprocedure;

SELECT 'ops.site_agent_register(uuid,text,bytea,bytea)'::regprocedure;

SELECT 'ops.site_agent_signing_key_set(uuid,bytea)'::regprocedure;

SELECT 'site_api.op_result(uuid,jsonb)'::regprocedure;

SELECT 'worker_api.bmc_op_result_rejected(bigint,jsonb,text)'::regprocedure;

SELECT 'worker_api.bmc_op_result_to_verify(bigint)'::regprocedure;

SELECT 'worker_api.bmc_op_result_verified(bigint,jsonb,bytea)'::regprocedure;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'ops.site_agent_register(uuid,text,bytea)'))::int;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.bmc_ops'::regclass AND conname = 'bmc_ops_result_rejected_check';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agents'::regclass AND conname = 'site_agents_signing_key_check';

-- By hand: the columns.
SELECT signing_key FROM compute.site_agents WHERE false;

SELECT result_envelope, result_rejected FROM compute.bmc_ops WHERE false;

-- By hand: machines.registerAgent takes the signing key.
SELECT 1 / count(*)::int FROM api.methods WHERE method = 'machines.registerAgent' AND input_schema -> 'properties' ? 'signing_key';

SELECT 1 / (pg_catalog.strpos(pg_catalog.pg_get_functiondef('compute.api_machine_agent_json(compute.site_agents)'::regprocedure), 'signing_key') > 0)::int;

ROLLBACK;
