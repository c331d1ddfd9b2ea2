-- Verify better_compute:reservation_events_once on pg
-- A reservation's events are one per transition: the bookings trigger that added one event per booking goes (by hand; compute.outbox_booking_changed goes in the next change)
-- Written by hand (docs/migrations.md).

BEGIN;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgrelid = 'compute.bookings'::regclass AND tgname = 'bookings_outbox'))::integer;

ROLLBACK;
