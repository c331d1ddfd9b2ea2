-- The five roles of docs/architecture.md §3 exist, cannot log in, and are not superusers.
BEGIN;
SELECT plan(15);

SELECT has_role(r) FROM unnest(ARRAY['bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator']) AS r;
SELECT isnt_superuser(r) FROM unnest(ARRAY['bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator']) AS r;
SELECT ok(NOT rolcanlogin, rolname || ' is NOLOGIN')
  FROM pg_roles WHERE rolname IN ('bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator') ORDER BY rolname;

SELECT * FROM finish();
ROLLBACK;
