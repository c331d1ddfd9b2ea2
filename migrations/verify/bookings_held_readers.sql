-- Verify better_compute:bookings_held_readers on pg
-- Readers of active holds go through compute.active_bookings; activation updates the reservation row only; node specs refresh on activation
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.booking_state(text,text)'::regprocedure;

SELECT 'compute.node_spec_reservation_changed()'::regprocedure;

ROLLBACK;
