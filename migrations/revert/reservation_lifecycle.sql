-- Revert better_compute:reservation_lifecycle from pg

BEGIN;

DROP FUNCTION compute.reservations_expire();
DROP FUNCTION compute.reservation_renew(uuid);
DROP FUNCTION compute.reservation_extend(uuid, timestamptz);
DROP FUNCTION compute.reservation_release(uuid);
DROP FUNCTION compute.reservation_void(uuid);
DROP FUNCTION compute.reservation_activate(uuid);
DROP FUNCTION compute.reservation_end(compute.reservations, timestamptz, text, text);
DROP FUNCTION compute.reservation_lock(uuid);
DROP FUNCTION compute.reserve(jsonb);
DROP FUNCTION compute.reservation_document(uuid);
DROP FUNCTION compute.atom_cdi_name(uuid);
DROP FUNCTION compute.request_timestamp(jsonb, text, boolean);
DROP FUNCTION compute.request_field(jsonb, text, text, boolean);

COMMIT;
