-- Revert better_compute:machines from pg
-- The role bc_site_agent stays: roles belong to the cluster (as the roles change keeps its roles).
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER join_tokens_machine ON compute.join_tokens;

DROP TRIGGER machines_outbox_insert ON compute.machines;

DROP TRIGGER machines_outbox_update ON compute.machines;

ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA site_api REVOKE EXECUTE ON FUNCTIONS FROM bc_site_agent;

DROP VIEW ops.bmc_ops;

DROP VIEW ops.site_agents;

DROP VIEW ops.machine_transitions;

DROP FUNCTION compute.bmc_op_result(uuid,bigint,bigint,text,jsonb,text);

DROP FUNCTION compute.bmc_op_signed(bigint,jsonb);

DROP FUNCTION compute.bmc_op_to_sign(bigint);

DROP FUNCTION compute.bmc_ops_claim(uuid,integer);

DROP FUNCTION compute.machine_get(text,boolean);

DROP FUNCTION compute.machine_issue(compute.machines,text,jsonb);

DROP FUNCTION compute.machine_json(compute.machines);

DROP FUNCTION compute.machine_operator_move(text,text,text);

DROP FUNCTION compute.machine_plan(compute.machines);

DROP FUNCTION compute.machine_reconcile(uuid);

DROP FUNCTION compute.machine_transition(uuid,text,text,boolean);

DROP FUNCTION compute.machines_sweep();

DROP FUNCTION ops.machine_abort(text,text);

DROP FUNCTION ops.machine_credentials_set(text,text,bytea);

DROP FUNCTION ops.machine_enroll(uuid,uuid,uuid,text,text,text,text,text,bytea);

DROP FUNCTION ops.machine_manage(text);

DROP FUNCTION ops.machine_provide(text);

DROP FUNCTION ops.machine_release(text);

DROP FUNCTION ops.machine_retry(text);

DROP FUNCTION ops.machine_show(text);

DROP FUNCTION ops.machines_list();

DROP FUNCTION ops.site_agent_key(uuid);

DROP FUNCTION ops.site_agent_register(uuid,text,bytea);

DROP FUNCTION site_api.bmc_sessions();

DROP FUNCTION site_api.error_contract();

DROP FUNCTION site_api.now();

DROP FUNCTION site_api.op_result(uuid,bigint,bigint,text,jsonb,text);

DROP FUNCTION site_api.ops_claim(uuid,integer);

DROP FUNCTION worker_api.bmc_op_signed(bigint,jsonb);

DROP FUNCTION worker_api.bmc_op_to_sign(bigint);

DROP FUNCTION worker_api.machine_reconcile(uuid);

DROP FUNCTION worker_api.machines_sweep();

COMMENT ON TABLE compute.bmc_ops IS NULL;

COMMENT ON TABLE compute.machine_credentials IS NULL;

COMMENT ON TABLE compute.machine_join_tokens IS NULL;

COMMENT ON TABLE compute.machine_states IS NULL;

COMMENT ON TABLE compute.machine_transitions IS NULL;

COMMENT ON TABLE compute.machines IS NULL;

COMMENT ON COLUMN compute.machines.generation IS NULL;

COMMENT ON TABLE compute.site_agents IS NULL;

COMMENT ON VIEW ops.machines IS NULL;

DROP VIEW ops.machines;

DROP SCHEMA site_api CASCADE;

DELETE FROM compute.work WHERE kind IN ('machines.sweep', 'machines.reconcile', 'bmc_ops.sign');

DELETE FROM compute.work_periodic WHERE kind = 'machines.sweep';

DROP TABLE compute.bmc_ops;

DROP TABLE compute.machine_join_tokens;

DROP TABLE compute.machine_credentials;

DROP TABLE compute.machines;

DROP TABLE compute.machine_transitions;

DROP TABLE compute.machine_states;

DROP TABLE compute.site_agents;

DELETE FROM compute.limits WHERE name IN ('machine_verify_seconds', 'machine_deploy_seconds', 'machine_deploy_wait_seconds',
    'machine_clean_seconds', 'machine_failures', 'machines_provisioning_per_agent', 'bmc_sessions_per_agent', 'bmc_op_seconds',
    'bmc_unreachable_retry_seconds');

DROP FUNCTION compute.machine_token_used();

DROP FUNCTION compute.outbox_machine_changed();

COMMIT;
