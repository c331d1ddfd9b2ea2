-- Verify better_compute:capacity_limits on pg

BEGIN;

SELECT 1 / (count(*) = 8)::int FROM compute.limits WHERE name IN ('provisional_seconds', 'hold_seconds_max', 'placement_candidates', 'devices_per_node', 'timeslice_slots', 'sweep_batch', 'capacity_search_checks', 'capacity_search_horizon_seconds');

ROLLBACK;
