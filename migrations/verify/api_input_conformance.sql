-- Verify better_compute:api_input_conformance on pg

BEGIN;

SELECT 1 / (compute.request_field('{"n": 371.0}', 'n', 'integer', true) = '371')::integer;
SELECT 1 / (SELECT (m.input_schema #>> '{properties,after,pattern}') IS NOT NULL FROM api.methods AS m WHERE m.method = 'events.list')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.request_timestamp(jsonb, text, boolean)'::regprocedure)
            LIKE '%invalid_time_zone_displacement_value%')::integer;

ROLLBACK;
