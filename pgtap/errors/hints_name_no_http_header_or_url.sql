-- Hints are read by psql users as well as over HTTP: no function's raise_error hint names an HTTP
-- header or a URL of the relay, and none cites a design document outside the repository.
BEGIN;
SELECT plan(2);

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
             AND p.prosrc ~ 'raise_error\([^;]*(X-[A-Z][A-Za-z]+-[A-Za-z]|/api/compute/|(GET|POST) /)'
           ORDER BY 1),
    '{}'::text[],
    'no raise_error hint names an HTTP header or a URL of the relay');

SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
             AND (p.prosrc LIKE '%DESIGN §%' OR pg_catalog.obj_description(p.oid, 'pg_proc') LIKE '%DESIGN §%')
           UNION ALL
          SELECT c.oid::regclass::text
            FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
           WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
             AND pg_catalog.obj_description(c.oid, 'pg_class') LIKE '%DESIGN §%'
           ORDER BY 1),
    '{}'::text[],
    'no hint or comment cites a design document outside the repository');

SELECT * FROM finish();
ROLLBACK;
