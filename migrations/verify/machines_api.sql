-- Verify better_compute:machines_api on pg
-- API methods machines.* (enroll, manage, provide, release, retry, abort, list, show, registerAgent, agents), one IAM decision each
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.api_input_bytes(jsonb,text)'::regprocedure;

SELECT 'compute.api_machine_agent_json(compute.site_agents)'::regprocedure;

SELECT 'compute.api_machines_abort(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_agents(uuid,jsonb)'::regprocedure;

SELECT 'compute.api_machines_enroll(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_enroll_prepare(uuid,jsonb)'::regprocedure;

SELECT 'compute.api_machines_enroll_void(text)'::regprocedure;

SELECT 'compute.api_machines_list(uuid,jsonb)'::regprocedure;

SELECT 'compute.api_machines_manage(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_provide(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_register_agent(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_release(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_retry(uuid,text,jsonb)'::regprocedure;

SELECT 'compute.api_machines_show(uuid,jsonb)'::regprocedure;

SELECT 'compute.machine_enroll(uuid,uuid,uuid,text,text,text,text,text,bytea)'::regprocedure;

SELECT 'compute.machine_show(text)'::regprocedure;

SELECT 'compute.site_agent_register(uuid,uuid,text,bytea)'::regprocedure;

ROLLBACK;
