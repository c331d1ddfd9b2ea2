-- Verify better_compute:node_join on pg

BEGIN;

SELECT 'node_api.join(text, jsonb, bytea)'::regprocedure;
SELECT 'node_api.session_open(uuid, text)'::regprocedure;
SELECT 'node_api.heartbeats(text, uuid[], bigint[])'::regprocedure;
SELECT 'node_api.session_close(uuid, bigint)'::regprocedure;
-- (inventory_report and node_public_key left node_api in node_reports_verified_by_the_worker)
SELECT * FROM compute.node_identities WHERE false;

ROLLBACK;
