-- Revert better_compute:atoms from pg

BEGIN;

DROP FUNCTION compute.device_set_layout(uuid, text, timestamptz);
DROP FUNCTION compute.layout_atoms(uuid, text);
DROP TABLE compute.atoms;

COMMIT;
