-- Verify better_compute:clock on pg

BEGIN;

SELECT compute.compute_now();
SELECT 'compute.clock_pin(timestamptz, boolean)'::regprocedure,
       'compute.clock_advance(interval, boolean)'::regprocedure,
       'compute.clock_unpin(boolean)'::regprocedure,
       'compute.clock_allow_pinning(boolean)'::regprocedure,
       'api.now()'::regprocedure, 'node_api.now()'::regprocedure,
       'worker_api.now()'::regprocedure, 'ops.now()'::regprocedure;

ROLLBACK;
