-- Deploy better_compute:node_limits to pg
-- The bounds of node sessions, specs and commands (sql/030_limits.sql lists them all).

BEGIN;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('session_timeout_seconds',          30, 'seconds', 'A node session not heard from for this long shows Connected=False (nothing else changes).'),
    ('node_spec_tick_window_seconds',   600, 'seconds', 'How far back the spec tick looks for bookings that started or ended.'),
    ('node_spec_resend_seconds',         30, 'seconds', 'How long a connected node may leave a signed spec unconfirmed before it is sent again.'),
    ('node_command_redelivery_seconds',  60, 'seconds', 'How long a delivered command may stay without a result before it is delivered again.');

COMMIT;
