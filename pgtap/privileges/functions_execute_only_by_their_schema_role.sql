-- Function privileges: a function in api / node_api / worker_api / ops is executable by exactly its
-- client role (and its owner); nothing in compute is executable by a client role; PUBLIC executes
-- nothing of ours. Checked over every function of our schemas, so new functions are covered too.
-- Members of extensions (btree_gist lives in compute) are the extension's, not ours: they are
-- unreachable anyway, since no client role has USAGE on compute.
BEGIN;
SELECT plan(11);

-- The clock, through each role's own schema.
SELECT function_privs_are('api', 'now', ARRAY[]::text[], 'bc_api', ARRAY['EXECUTE']);
SELECT function_privs_are('node_api', 'now', ARRAY[]::text[], 'bc_gateway', ARRAY['EXECUTE']);
SELECT function_privs_are('worker_api', 'now', ARRAY[]::text[], 'bc_worker', ARRAY['EXECUTE']);
SELECT function_privs_are('ops', 'now', ARRAY[]::text[], 'bc_operator', ARRAY['EXECUTE']);
SELECT function_privs_are('api', 'now', ARRAY[]::text[], 'bc_gateway', ARRAY[]::text[]);
SELECT function_privs_are('compute', 'compute_now', ARRAY[]::text[], 'bc_api', ARRAY[]::text[]);
SELECT function_privs_are('compute', 'clock_pin', ARRAY['timestamp with time zone', 'boolean'], 'bc_operator', ARRAY[]::text[]);

CREATE FUNCTION pg_temp.in_extension(p_oid oid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_depend WHERE classid = 'pg_proc'::regclass AND objid = p_oid AND deptype = 'e')
$$;

CREATE TEMP TABLE expected_grants(schema_name text, role_name text) ON COMMIT DROP;
INSERT INTO expected_grants VALUES ('api', 'bc_api'), ('node_api', 'bc_gateway'), ('worker_api', 'bc_worker'),
                                   ('ops', 'bc_operator'), ('site_api', 'bc_site_agent'), ('agent_api', 'bc_gateway');

SELECT is_empty($$
    SELECT n.nspname || '.' || p.proname || ' -> ' || r.role_name
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     CROSS JOIN unnest(ARRAY['bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent']) AS r(role_name)
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api', 'agent_api') AND NOT pg_temp.in_extension(p.oid)
       AND has_function_privilege(r.role_name, p.oid, 'EXECUTE')
       AND NOT EXISTS (SELECT 1 FROM expected_grants e WHERE e.schema_name = n.nspname AND e.role_name = r.role_name)
$$, 'no client role may execute a function outside its own schema');

SELECT is_empty($$
    SELECT n.nspname || '.' || p.proname || ' -> ' || e.role_name
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN expected_grants e ON e.schema_name = n.nspname
     WHERE NOT pg_temp.in_extension(p.oid) AND NOT has_function_privilege(e.role_name, p.oid, 'EXECUTE')
$$, 'every function of a client schema is executable by that schema''s role');

SELECT is_empty($$
    SELECT n.nspname || '.' || p.proname
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api', 'agent_api') AND NOT pg_temp.in_extension(p.oid)
       AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))
$$, 'PUBLIC may execute none of our functions');

SELECT is_empty($$
    SELECT n.nspname || '.' || p.proname
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api', 'agent_api') AND NOT pg_temp.in_extension(p.oid)
       AND p.proowner <> 'bc_owner'::regrole
$$, 'bc_owner owns every function');

SELECT * FROM finish();
ROLLBACK;
