-- Verify better_compute:bookings_held on pg
-- Bookings are written once as held: the exclusion constraint and the live-booking indexes read state = 'held'; provisional or active is the reservation's state (compute.active_bookings)
-- Written by hand (docs/migrations.md).

BEGIN;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint
 WHERE conrelid = 'compute.bookings'::regclass AND conname = 'bookings_exclusive' AND pg_catalog.pg_get_constraintdef(oid) LIKE '%''held''%';
SELECT 'compute.active_bookings'::regclass;

ROLLBACK;
