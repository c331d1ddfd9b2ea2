-- Verify better_compute:input_schema_in_the_database on pg

BEGIN;

SELECT 1 / (compute.input_value_problem('{"type":"string","maxLength":2}', '"abc"') IS NOT NULL)::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('ops.call(text, jsonb, text)'::regprocedure) LIKE '%length(p_reason) > 1000%')::integer;

ROLLBACK;
