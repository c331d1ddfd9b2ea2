-- Revert better_compute:node_join from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION node_api.node_key_renewed(uuid, bigint, bytea);
DROP FUNCTION node_api.inventory_report(uuid, bigint, jsonb);
DROP FUNCTION node_api.session_close(uuid, bigint);
DROP FUNCTION node_api.heartbeats(text, uuid[], bigint[]);
DROP FUNCTION node_api.session_open(uuid, text);
DROP FUNCTION node_api.node_public_key(uuid);
DROP FUNCTION node_api.join(text, jsonb, bytea);
DROP FUNCTION compute.node_connection(uuid);
DROP FUNCTION compute.session_close(uuid, bigint);
DROP FUNCTION compute.sessions_heard(text, uuid[], bigint[]);
DROP FUNCTION compute.session_open(uuid, text);
DROP FUNCTION compute.session_require(uuid, bigint);
DROP FUNCTION compute.node_join(text, jsonb, bytea);
DROP TABLE compute.node_identities;

COMMIT;
