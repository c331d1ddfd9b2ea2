-- Revert better_compute:node_commands from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION node_api.push_due(uuid[], bigint[]);
DROP FUNCTION compute.api_nodes_commands(uuid, jsonb);
DROP FUNCTION compute.api_nodes_command(uuid, text, jsonb);
DROP FUNCTION node_api.command_result(uuid, bigint, uuid, text, text);
DROP FUNCTION node_api.commands_due(uuid, bigint);
DROP FUNCTION worker_api.command_signed(uuid, jsonb);
DROP FUNCTION worker_api.command_to_sign(uuid);
DROP FUNCTION compute.command_enqueue(uuid, text, jsonb, text, uuid);
DROP FUNCTION compute.command_json(compute.node_commands);
DROP TABLE compute.node_commands;

COMMIT;
