-- Deploy better_compute:outbox to pg (reworked after @v0.4.0)
-- Nothing to deploy. The objects of outbox are those outbox@v0.4.0 made, as later changes left them
-- (the outbox table, its triggers less bookings_outbox (reservation_events_once dropped it: a reservation's
-- events are one per transition), worker_api.outbox_read). This instance carries verify/outbox.sql, which
-- checks what still holds; it supersedes verify/outbox@v0.4.0.sql, the script @v0.3.0 released, which
-- Sqitch and our runner no longer run (docs/migrations.md, "A later change supersedes a verify script").

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
