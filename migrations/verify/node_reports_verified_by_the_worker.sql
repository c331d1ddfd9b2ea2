-- Verify better_compute:node_reports_verified_by_the_worker on pg

BEGIN;

-- The gateway may append a report and nothing else of it; the worker decides.
SELECT 1 / (has_function_privilege('bc_gateway', 'node_api.report(uuid, bigint, jsonb)', 'EXECUTE')
            AND has_function_privilege('bc_worker', 'worker_api.node_report_verified(bigint, bytea)', 'EXECUTE')
            AND to_regprocedure('compute.node_api_removed(text)') IS NOT NULL)::integer;
-- The writes a gateway once made itself only answer UNSUPPORTED.
DO $$
BEGIN
    PERFORM node_api.command_result(gen_random_uuid(), 0, gen_random_uuid(), 'succeeded', 'forged');
    RAISE EXCEPTION 'node_api.command_result still applies a result' USING ERRCODE = 'BC400';
EXCEPTION WHEN SQLSTATE 'BC501' THEN NULL;
END
$$;
SELECT 1 / (compute.report_bigint('{"generation": 7}', 'generation') = 7)::integer;
SELECT report_id, state, reason FROM compute.node_reports WHERE false;
SELECT report_epoch, report_seq FROM compute.node_identities WHERE false;

ROLLBACK;
