-- Verify better_compute:capacity_timeline on pg
-- capacity.timeline: a pool's GPUs, atoms and bookings over a window for the web console (others' bookings only as busy)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.api_capacity_timeline(uuid,jsonb)'::regprocedure;
SELECT 1/count(*) FROM api.methods WHERE method = 'capacity.timeline';

ROLLBACK;
