-- Revert better_compute:ops_call from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION ops.call(text, jsonb, text);

COMMIT;
