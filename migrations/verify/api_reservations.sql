-- Verify better_compute:api_reservations on pg

BEGIN;

SELECT 'compute.api_reservations_prepare(uuid, jsonb)'::regprocedure;
SELECT 'compute.api_reservations_create(uuid, text, jsonb)'::regprocedure;
SELECT 'compute.api_reservations_void(text)'::regprocedure;
SELECT 'compute.api_reservations_get(uuid, jsonb)'::regprocedure;
SELECT 'compute.api_reservations_list(uuid, jsonb)'::regprocedure;
SELECT 'compute.api_reservations_extend(uuid, text, jsonb)'::regprocedure;

ROLLBACK;
