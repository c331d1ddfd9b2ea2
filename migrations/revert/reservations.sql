-- Revert better_compute:reservations from pg

BEGIN;

DROP TRIGGER atoms_keep_bookings ON compute.atoms;
DROP FUNCTION compute.atom_keeps_its_bookings();
DROP TABLE compute.bookings;
DROP FUNCTION compute.booking_matches_atom();
DROP TABLE compute.reservations;

COMMIT;
