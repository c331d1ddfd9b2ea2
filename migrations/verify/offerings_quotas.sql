-- Verify better_compute:offerings_quotas on pg

BEGIN;

SELECT offering_id, shape, max_count, max_duration FROM compute.offerings WHERE false;
SELECT quota_id, max_atoms, gpu_hours_per_month FROM compute.quotas WHERE false;
SELECT 'compute.offering_create(uuid, text, integer, interval, text)'::regprocedure,
       'compute.quota_set(uuid, uuid, uuid, integer, numeric)'::regprocedure;

ROLLBACK;
