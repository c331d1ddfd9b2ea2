-- Revert better_compute:inventory from pg

BEGIN;

DROP FUNCTION compute.node_register(uuid, text, jsonb);
DROP FUNCTION compute.inventory_layout(jsonb);
DROP FUNCTION compute.inventory_validate(jsonb);
DROP FUNCTION compute.inventory_require(jsonb, text, text, text);

COMMIT;
