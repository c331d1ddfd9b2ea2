-- Verify better_compute:admission_sweep on pg

BEGIN;

SELECT 'worker_api.admissions_expire()'::regprocedure;
SELECT 1/count(*) FROM compute.work_periodic WHERE kind = 'admissions.expire';

ROLLBACK;
