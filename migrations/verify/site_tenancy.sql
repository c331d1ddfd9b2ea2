-- Verify better_compute:site_tenancy on pg

BEGIN;

SELECT site_id, tenant_id, name FROM compute.sites WHERE false;
SELECT 'compute.site_create(text, uuid, uuid)'::regprocedure;

ROLLBACK;
