-- Deploy better_compute:reservation_events_once to pg
-- A reservation's events are one per transition: the bookings trigger that added one event per booking goes (by hand; compute.outbox_booking_changed goes in the next change)
-- Written by hand: a trigger (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER bookings_outbox ON compute.bookings;

COMMIT;
