-- Verify better_compute:reservations on pg

BEGIN;

SELECT reservation_id, state, during, idempotency_key FROM compute.reservations WHERE false;
SELECT booking_id, atom_id, slices, shares, during, state FROM compute.bookings WHERE false;
SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conname = 'bookings_exclusive' AND contype = 'x';
SELECT 1 / count(*)::int FROM pg_catalog.pg_trigger WHERE tgname IN ('bookings_match_atom', 'atoms_keep_bookings') HAVING count(*) = 2;

ROLLBACK;
