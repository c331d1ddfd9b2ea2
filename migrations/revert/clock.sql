-- Revert better_compute:clock from pg

BEGIN;

DROP FUNCTION ops.now();
DROP FUNCTION worker_api.now();
DROP FUNCTION node_api.now();
DROP FUNCTION api.now();
DROP FUNCTION compute.clock_unpin(boolean);
DROP FUNCTION compute.clock_advance(interval, boolean);
DROP FUNCTION compute.clock_pin(timestamptz, boolean);
DROP FUNCTION compute.clock_require_pinning(text);
DROP FUNCTION compute.clock_allow_pinning(boolean);
DROP FUNCTION compute.compute_now();
DROP TABLE compute.clock_control;

COMMIT;
