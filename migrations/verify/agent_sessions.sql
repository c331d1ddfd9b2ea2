-- Verify better_compute:agent_sessions on pg
-- Site agents dial out to a gateway: certificates proven by the agent's signing key (svid_requests kind agent), sessions bound to the certified key with a random session id (site_agent_sessions), agent_api for the gateway (the agent taken from the session row)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'agent_api.bmc_sessions()'::regprocedure;

SELECT 'agent_api.certificate_request(uuid,text,text,bytea,jsonb)'::regprocedure;

SELECT 'agent_api.op_result(uuid,jsonb)'::regprocedure;

SELECT 'agent_api.ops_claim(uuid,integer)'::regprocedure;

SELECT 'agent_api.session_close(uuid)'::regprocedure;

SELECT 'agent_api.session_open(uuid,uuid,text,bytea)'::regprocedure;

SELECT 'compute.agent_certificate_refusal(compute.svid_requests,bytea)'::regprocedure;

SELECT 'compute.agent_certificate_request(uuid,text,text,bytea,jsonb)'::regprocedure;

SELECT 'compute.agent_certified(compute.svid_requests,bytea)'::regprocedure;

SELECT 'compute.agent_of_session(uuid)'::regprocedure;

SELECT 'compute.agent_session_open(uuid,uuid,text,bytea)'::regprocedure;

SELECT 'compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[],uuid)'::regprocedure;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[])'))::int;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_agent_id_fkey';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_certified_key_check';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_epoch_check';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_gateway_check';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_pkey';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_session_id_key';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.site_agent_sessions'::regclass AND conname = 'site_agent_sessions_signing_key_check';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.svid_requests'::regclass AND conname = 'svid_requests_agent_has_agent_and_proof';

ROLLBACK;
