-- Verify better_compute:capacity_limits on pg (reworked after @v0.3.0: supersedes verify/capacity_limits@v0.3.0.sql)

BEGIN;

SELECT 1 / (count(*) = 7)::int FROM compute.limits WHERE name IN ('provisional_seconds', 'hold_seconds_max', 'placement_candidates', 'devices_per_node', 'timeslice_slots', 'sweep_batch', 'capacity_search_horizon_seconds');

ROLLBACK;
