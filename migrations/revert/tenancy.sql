-- Revert better_compute:tenancy from pg

BEGIN;

DROP FUNCTION compute.project_create(uuid, text);
DROP FUNCTION compute.tenant_ensure(uuid, text);
DROP TABLE compute.projects;
DROP TABLE compute.tenants;

COMMIT;
