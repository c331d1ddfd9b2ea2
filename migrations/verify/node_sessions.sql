-- Verify better_compute:node_sessions on pg

BEGIN;

SELECT node_id, epoch, gateway, last_heard_at, closed_at FROM compute.node_sessions WHERE false;
SELECT connected, last_heard_seconds FROM ops.nodes WHERE false;

ROLLBACK;
