-- Verify better_compute:bookings_held_everywhere on pg
-- ops.devices, compute.fleet_metrics and the machines' reservation checks read a live booking as held (bookings are written once as held since bookings_held)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1;

ROLLBACK;
