-- Verify better_compute:schemas on pg (fails with division_by_zero when something is missing)

BEGIN;

SELECT 1 / (count(*) = 5)::int
  FROM pg_catalog.pg_namespace
 WHERE nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
   AND nspowner = 'bc_owner'::regrole;
SELECT 1 / (NOT pg_catalog.has_schema_privilege('bc_api', 'compute', 'usage'))::int;
-- Default privileges: four schemas grant EXECUTE to their role, ops also SELECT; PUBLIC loses EXECUTE.
SELECT 1 / (count(*) = 5)::int
  FROM pg_catalog.pg_default_acl
 WHERE defaclrole = 'bc_owner'::regrole AND defaclnamespace <> 0;
SELECT 1 / (count(*) = 1)::int
  FROM pg_catalog.pg_default_acl
 WHERE defaclrole = 'bc_owner'::regrole AND defaclnamespace = 0 AND defaclobjtype = 'f';

ROLLBACK;
