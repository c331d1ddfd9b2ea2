-- Revert better_compute:admission_sweep from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION worker_api.admissions_expire();
DELETE FROM compute.work WHERE kind = 'admissions.expire';
DELETE FROM compute.work_periodic WHERE kind = 'admissions.expire';

COMMIT;
