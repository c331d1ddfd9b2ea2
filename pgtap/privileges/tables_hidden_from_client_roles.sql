-- Table privileges: client roles hold no privilege on any table of compute; operators may only
-- SELECT the views of ops; nothing is granted to PUBLIC.
BEGIN;
SELECT plan(8);

SELECT table_privs_are('compute', 'limits', 'bc_api', ARRAY[]::text[]);
SELECT table_privs_are('compute', 'limits', 'bc_operator', ARRAY[]::text[]);
SELECT table_privs_are('compute', 'clock_control', 'bc_worker', ARRAY[]::text[]);
SELECT table_privs_are('compute', 'error_codes', 'bc_gateway', ARRAY[]::text[]);
SELECT table_privs_are('ops', 'limits', 'bc_operator', ARRAY['SELECT']);
SELECT table_privs_are('ops', 'error_codes', 'bc_operator', ARRAY['SELECT']);

SELECT is_empty($$
    SELECT n.nspname || '.' || c.relname || ' -> ' || r.role_name || ' ' || pr.priv
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     CROSS JOIN unnest(ARRAY['bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent']) AS r(role_name)
     CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS pr(priv)
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api') AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
       AND has_table_privilege(r.role_name, c.oid, pr.priv)
       AND NOT (n.nspname = 'ops' AND r.role_name = 'bc_operator' AND pr.priv = 'SELECT')
$$, 'no client role holds a table privilege beyond SELECT on ops views for operators');

SELECT is_empty($$
    SELECT n.nspname || '.' || c.relname
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api')
       AND EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0)
$$, 'PUBLIC holds no privilege on our tables and views');

SELECT * FROM finish();
ROLLBACK;
