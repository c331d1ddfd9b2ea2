-- Revert better_compute:capacity_timeline from pg
-- capacity.timeline: a pool's GPUs, atoms and bookings over a window for the web console (others' bookings only as busy)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

-- By hand: the catalog row.
DELETE FROM api.methods WHERE method = 'capacity.timeline';

DROP FUNCTION compute.api_capacity_timeline(uuid,jsonb);

COMMIT;
