-- Verify better_compute:hints_speak_sql on pg
-- Hints and comments speak SQL and cite the project's docs: no HTTP header or URL in a hint psql users read, docs/architecture.md instead of a design file outside the repository
-- What must still hold: no hint of these functions names an HTTP header or URL, and no comment or
-- hint cites a document outside the repository.

BEGIN;

SELECT 1 / (pg_catalog.count(*) = 3)::int
  FROM pg_catalog.pg_proc
 WHERE oid IN ('api.prepare(text, uuid, jsonb, text)'::regprocedure, 'compute.method_get(text)'::regprocedure,
               'compute.reserve(jsonb)'::regprocedure)
   AND prosrc !~ '(X-[A-Z][A-Za-z-]+|/api/compute/|DESIGN §)';

SELECT 1 / (pg_catalog.count(*) = 3)::int
  FROM (VALUES (pg_catalog.obj_description('compute.error_codes'::regclass, 'pg_class')),
               (pg_catalog.obj_description('compute.reserve(jsonb)'::regprocedure, 'pg_proc')),
               (pg_catalog.obj_description('compute.reservation_document(uuid)'::regprocedure, 'pg_proc'))) AS c (text)
 WHERE c.text LIKE '%docs/architecture.md §%';

ROLLBACK;
