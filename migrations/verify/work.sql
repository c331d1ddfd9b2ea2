-- Verify better_compute:work on pg

BEGIN;

SELECT work_id, kind, key, state, repoke, lease_epoch, lease_expires_at FROM compute.work WHERE false;
SELECT kind, every FROM compute.work_periodic WHERE false;
SELECT 'worker_api.work_claim(text, integer, double precision, text[])'::regprocedure,
       'worker_api.work_complete(bigint, bigint, double precision)'::regprocedure,
       'worker_api.work_fail(bigint, bigint, text)'::regprocedure, 'worker_api.work_extend(bigint, bigint, double precision)'::regprocedure,
       'compute.work_poke(text, text, jsonb, timestamptz, integer)'::regprocedure;
SELECT work_id FROM ops.work_dead WHERE false;

ROLLBACK;
