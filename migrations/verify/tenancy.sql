-- Verify better_compute:tenancy on pg

BEGIN;

SELECT tenant_id, name, created_at FROM compute.tenants WHERE false;
SELECT project_id, tenant_id, name FROM compute.projects WHERE false;
SELECT 'compute.tenant_ensure(uuid, text)'::regprocedure, 'compute.project_create(uuid, text)'::regprocedure;

ROLLBACK;
