-- Schema privileges: every client role has USAGE on its own schema and nothing on any other;
-- compute is private to its owner. Every role x schema pair is asserted.
BEGIN;
SELECT plan(42);

SELECT schema_owner_is(s, 'bc_owner') FROM unnest(ARRAY['compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api', 'agent_api']) AS s;

SELECT schema_privs_are(s.name, r.name,
           CASE WHEN (s.name, r.name) IN (('api', 'bc_api'), ('node_api', 'bc_gateway'),
                                          ('worker_api', 'bc_worker'), ('ops', 'bc_operator'),
                                          ('site_api', 'bc_site_agent'), ('agent_api', 'bc_gateway'))
                THEN ARRAY['USAGE'] ELSE ARRAY[]::text[] END,
           r.name || ' on schema ' || s.name)
  FROM unnest(ARRAY['compute', 'api', 'node_api', 'worker_api', 'ops', 'site_api', 'agent_api']) AS s(name)
 CROSS JOIN unnest(ARRAY['bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent']) AS r(name)
 ORDER BY s.name, r.name;

SELECT * FROM finish();
ROLLBACK;
