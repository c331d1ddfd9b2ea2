-- Verify better_compute:schemas on pg

BEGIN;

SELECT 1 / (count(*) = 5)::int
  FROM pg_catalog.pg_namespace
 WHERE nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
   AND nspowner = 'bc_owner'::regrole;
SELECT 1 / (NOT pg_catalog.has_schema_privilege('bc_api', 'compute', 'usage'))::int;

ROLLBACK;
