-- Verify better_compute:offerings_quotas on pg (reworked after @v0.3.0: supersedes verify/offerings_quotas@v0.3.0.sql)

BEGIN;

SELECT offering_id, shape, max_count, max_duration FROM compute.offerings WHERE false;
SELECT quota_id, max_atoms, gpu_hours_per_month FROM compute.quotas WHERE false;
SELECT 'compute.offering_create'::regproc,
       'compute.quota_set(uuid, uuid, uuid, integer, numeric)'::regprocedure;

ROLLBACK;
