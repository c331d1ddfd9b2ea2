-- Verify better_compute:roles on pg (fails with division_by_zero when a role is missing)

BEGIN;

SELECT 1 / (count(*) = 5)::int
  FROM pg_catalog.pg_roles
 WHERE rolname IN ('bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator') AND NOT rolcanlogin;

ROLLBACK;
