-- Revert better_compute:ops_capacity from pg

BEGIN;

DROP FUNCTION ops.device_set_layout(text, text, timestamptz);
DROP FUNCTION ops.capacity_earliest(uuid, text, integer, interval, timestamptz);
DROP FUNCTION ops.capacity_free(uuid, text, timestamptz, timestamptz);
DROP FUNCTION ops.node_clear(text, text);
DROP FUNCTION ops.node_quarantine(text, text);
DROP FUNCTION ops.node_drain(text, text);
DROP FUNCTION ops.node_cordon(text, text);
DROP FUNCTION ops.node_id(text);
DROP VIEW ops.atom_holders;
DROP VIEW ops.pool_capacity;
DROP VIEW ops.nodes;

COMMIT;
