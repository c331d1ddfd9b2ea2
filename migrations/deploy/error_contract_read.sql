-- Deploy better_compute:error_contract_read to pg
-- The error contract is read from the database by every process (error_contract() in each client
-- schema) instead of copied into Python.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION api.error_contract()
 RETURNS TABLE(code text, sqlstate text, http_status integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $function$;

COMMENT ON FUNCTION api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the relay read it when they start.';

GRANT EXECUTE ON FUNCTION api.error_contract() TO bc_api;

CREATE OR REPLACE FUNCTION node_api.error_contract()
 RETURNS TABLE(code text, sqlstate text, http_status integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $function$;

COMMENT ON FUNCTION node_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the gateway read it when they start.';

GRANT EXECUTE ON FUNCTION node_api.error_contract() TO bc_gateway;

CREATE OR REPLACE FUNCTION ops.error_contract()
 RETURNS TABLE(code text, sqlstate text, http_status integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $function$;

COMMENT ON FUNCTION ops.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as operators and the CLI read it when they start.';

GRANT EXECUTE ON FUNCTION ops.error_contract() TO bc_operator;

CREATE OR REPLACE FUNCTION worker_api.error_contract()
 RETURNS TABLE(code text, sqlstate text, http_status integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $function$;

COMMENT ON FUNCTION worker_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the worker read it when they start.';

GRANT EXECUTE ON FUNCTION worker_api.error_contract() TO bc_worker;

COMMIT;
