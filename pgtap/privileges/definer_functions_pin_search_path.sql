-- Every SECURITY DEFINER function pins search_path to ''; the clock wrappers are definers.
BEGIN;
SELECT plan(5);

SELECT is_definer('api', 'now', ARRAY[]::text[]);
SELECT is_definer('node_api', 'now', ARRAY[]::text[]);
SELECT is_definer('worker_api', 'now', ARRAY[]::text[]);
SELECT is_definer('ops', 'now', ARRAY[]::text[]);

SELECT is_empty($$
    SELECT n.nspname || '.' || p.proname
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops') AND p.prosecdef
       AND NOT coalesce('search_path=""' = ANY (p.proconfig), false)
$$, 'every SECURITY DEFINER function sets search_path = ''''');

SELECT * FROM finish();
ROLLBACK;
