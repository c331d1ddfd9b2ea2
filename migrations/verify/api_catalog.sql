-- Verify better_compute:api_catalog on pg

BEGIN;

SELECT 'api.catalog()'::regprocedure;
SELECT 'compute.method_get(text)'::regprocedure;
SELECT 'compute.input_check(jsonb, jsonb)'::regprocedure;
SELECT 'compute.input_uuid(jsonb, text, boolean)'::regprocedure;
SELECT 'compute.input_text(jsonb, text, boolean)'::regprocedure;
SELECT 'compute.input_integer(jsonb, text, boolean)'::regprocedure;
SELECT * FROM api.methods WHERE false;

ROLLBACK;
