-- Verify better_compute:node_limits on pg

BEGIN;

SELECT 1/(count(*) = 4)::integer FROM compute.limits WHERE name IN ('session_timeout_seconds', 'node_spec_tick_window_seconds', 'node_spec_resend_seconds', 'node_command_redelivery_seconds');

ROLLBACK;
