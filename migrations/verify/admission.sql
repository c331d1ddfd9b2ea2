-- Verify better_compute:admission on pg

BEGIN;

SELECT 'compute.resource_describe(text, text)'::regprocedure;
SELECT 'compute.resource_json(uuid, text, text, jsonb)'::regprocedure;
SELECT 'compute.resource_require(uuid, text, text)'::regprocedure;
SELECT 'compute.iam_request(uuid, api.methods, text, jsonb)'::regprocedure;
SELECT 'api.prepare(text, uuid, jsonb)'::regprocedure;
SELECT 'compute.decision_allowed(jsonb)'::regprocedure;
SELECT * FROM compute.admissions WHERE false;

ROLLBACK;
