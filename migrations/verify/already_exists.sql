-- Verify better_compute:already_exists on pg

BEGIN;

SELECT 1 / (SELECT count(*) FROM compute.error_codes WHERE code = 'ALREADY_EXISTS' AND sqlstate = 'BC419' AND http_status = 409)::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.api_sites_create(uuid, text, jsonb)'::regprocedure) LIKE '%ALREADY_EXISTS%')::integer;

ROLLBACK;
