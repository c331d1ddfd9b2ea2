-- Deploy better_compute:error_contract_read to pg
-- The error contract is read from the database by every process (error_contract() in each client
-- schema) instead of copied into Python.

BEGIN;

SET LOCAL ROLE bc_owner;

-- Every process maps SQLSTATEs to codes and statuses from these rows, read when it opens its pool
-- (py/better_compute/errors.py keeps only PostgreSQL's own SQLSTATEs); each client role reads them
-- through its own schema, as it reads the clock.
CREATE FUNCTION api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the relay read it when they start.';
CREATE FUNCTION node_api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION node_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the gateway read it when they start.';
CREATE FUNCTION worker_api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION worker_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the worker read it when they start.';
CREATE FUNCTION ops.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION ops.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as operators and the CLI read it when they start.';

COMMIT;
