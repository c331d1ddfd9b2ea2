-- Revert better_compute:node_limits from pg

BEGIN;

DELETE FROM compute.limits WHERE name IN ('session_timeout_seconds', 'node_spec_tick_window_seconds', 'node_spec_resend_seconds', 'node_command_redelivery_seconds');

COMMIT;
