-- The five roles of docs/architecture.md §3 and bc_site_agent (site agents, sql/700) exist, cannot log in, and are not superusers.
BEGIN;
SELECT plan(18);

SELECT has_role(r) FROM unnest(ARRAY['bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent']) AS r;
SELECT isnt_superuser(r) FROM unnest(ARRAY['bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent']) AS r;
SELECT ok(NOT rolcanlogin, rolname || ' is NOLOGIN')
  FROM pg_roles WHERE rolname IN ('bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator', 'bc_site_agent') ORDER BY rolname;

SELECT * FROM finish();
ROLLBACK;
