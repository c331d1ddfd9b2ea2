-- Deploy better_compute:capacity_limits to pg
-- The bounds of the capacity core, added to compute.limits (sql/030_limits.sql lists them all).

BEGIN;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('provisional_seconds',              60, 'seconds', 'How long a provisional reservation holds its atoms before it is voided.'),
    ('hold_seconds_max',              86400, 'seconds', 'Longest lease (hold_seconds) of a reservation.'),
    ('placement_candidates',             64, 'count',   'Free atoms one placement considers (more only when a request asks for more).'),
    ('devices_per_node',                 64, 'count',   'GPUs one node may report.'),
    ('timeslice_slots',                  64, 'count',   'Most time-slice slots of one GPU.'),
    ('sweep_batch',                    1000, 'count',   'Reservations one expiry sweep ends.'),
    ('capacity_search_checks',          500, 'count',   'Candidate start times capacity_earliest tries.'),
    ('capacity_search_horizon_seconds', 7776000, 'seconds', 'How far ahead capacity_earliest looks (90 days).');

COMMIT;
