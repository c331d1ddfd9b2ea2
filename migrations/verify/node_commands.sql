-- Verify better_compute:node_commands on pg

BEGIN;

SELECT 'worker_api.command_to_sign(uuid)'::regprocedure;
SELECT 'worker_api.command_signed(uuid, jsonb)'::regprocedure;
SELECT 'node_api.commands_due(uuid, bigint)'::regprocedure;
-- (command_result left node_api in node_reports_verified_by_the_worker)
SELECT * FROM compute.node_commands WHERE false;

ROLLBACK;
