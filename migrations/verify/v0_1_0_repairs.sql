-- Verify better_compute:v0_1_0_repairs on pg

BEGIN;

SELECT 'compute.clock_require_pinning(text)'::regprocedure;

ROLLBACK;
