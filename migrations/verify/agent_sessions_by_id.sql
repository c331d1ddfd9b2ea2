-- Verify better_compute:agent_sessions_by_id on pg
-- A site agent's session has a random id, new at each open: agent_api.ops_claim / op_result / session_close name it, and the agent comes from the session row, never from a parameter
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'agent_api.op_result(uuid,jsonb)'::regprocedure;

SELECT 'agent_api.ops_claim(uuid,integer)'::regprocedure;

SELECT 'agent_api.session_close(uuid)'::regprocedure;

SELECT 'compute.agent_of_session(uuid)'::regprocedure;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'agent_api.op_result(uuid,bigint,jsonb)'))::int;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'agent_api.ops_claim(uuid,bigint,integer)'))::int;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'agent_api.session_close(uuid,bigint)'))::int;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'compute.agent_session_require(uuid,bigint)'))::int;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_session_id_key';

ROLLBACK;
