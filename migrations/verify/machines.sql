-- Verify better_compute:machines on pg

BEGIN;

SELECT 1 / count(*) FROM compute.machine_transitions WHERE from_state = 'enrolled' AND event = 'manage' AND to_state = 'verifying';
SELECT 1 / (compute.limit('bmc_sessions_per_agent') > 0)::integer;
SELECT 1 / has_schema_privilege('bc_site_agent', 'site_api', 'USAGE')::integer;
SELECT 1 / has_function_privilege('bc_site_agent', 'site_api.ops_claim(uuid, integer)', 'EXECUTE')::integer;
SELECT 1 / (NOT has_function_privilege('bc_worker', 'site_api.ops_claim(uuid, integer)', 'EXECUTE'))::integer;
SELECT machine_id, state, bmc_reachable FROM ops.machines WHERE false;
SELECT op_id, epoch, kind FROM compute.bmc_ops WHERE false;

ROLLBACK;
