-- Revert better_compute:node_flags from pg

BEGIN;

DROP FUNCTION compute.node_drains_complete();
DROP FUNCTION compute.node_flag_clear(uuid, text);
DROP FUNCTION compute.node_flag_set(uuid, text, text, text);

COMMIT;
