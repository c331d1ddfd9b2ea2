-- Verify better_compute:node_join on pg

BEGIN;

SELECT 'node_api.join(text, jsonb, bytea)'::regprocedure;
SELECT 'node_api.node_public_key(uuid)'::regprocedure;
SELECT 'node_api.session_open(uuid, text)'::regprocedure;
SELECT 'node_api.heartbeats(text, uuid[], bigint[])'::regprocedure;
SELECT 'node_api.session_close(uuid, bigint)'::regprocedure;
SELECT 'node_api.inventory_report(uuid, bigint, jsonb)'::regprocedure;
SELECT * FROM compute.node_identities WHERE false;

ROLLBACK;
