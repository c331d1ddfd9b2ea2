-- Verify better_compute:ops_call on pg

BEGIN;

SELECT 'ops.call(text, jsonb, text)'::regprocedure;

ROLLBACK;
