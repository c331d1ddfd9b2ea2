-- Verify better_compute:timeline_reads_held on pg
-- capacity.timeline reads a live booking as held and shows a booking's state as its reservation makes it (compute.booking_state)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1;

ROLLBACK;
