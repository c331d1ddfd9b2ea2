-- Revert better_compute:api_reservations from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.api_capacity_rollup(uuid, jsonb);
DROP FUNCTION compute.api_capacity_earliest(uuid, jsonb);
DROP FUNCTION compute.api_capacity_free(uuid, jsonb);
DROP FUNCTION compute.api_reservations_release(uuid, text, jsonb);
DROP FUNCTION compute.api_reservations_renew(uuid, text, jsonb);
DROP FUNCTION compute.api_reservations_extend(uuid, text, jsonb);
DROP FUNCTION compute.api_reservations_list(uuid, jsonb);
DROP FUNCTION compute.api_reservations_get(uuid, jsonb);
DROP FUNCTION compute.api_reservations_void(text);
DROP FUNCTION compute.api_reservations_create(uuid, text, jsonb);
DROP FUNCTION compute.api_reservations_prepare(uuid, jsonb);

COMMIT;
