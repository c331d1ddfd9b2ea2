-- Revert better_compute:admission from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.admissions_expire();
DROP FUNCTION api.resolve(text, text);
DROP FUNCTION api.read(text, uuid, jsonb, jsonb);
DROP FUNCTION api.admit(uuid, jsonb);
DROP FUNCTION compute.admission_end(compute.admissions, text, jsonb);
DROP FUNCTION compute.denial(api.methods, jsonb);
DROP FUNCTION compute.error_answer(text, text, text);
DROP FUNCTION compute.decision_allowed(jsonb);
DROP FUNCTION api.prepare(text, uuid, jsonb);
DROP FUNCTION compute.iam_request(uuid, api.methods, text, jsonb);
DROP FUNCTION compute.resource_require(uuid, text, text);
DROP FUNCTION compute.resource_json(uuid, text, text, jsonb);
DROP FUNCTION compute.resource_describe(text, text);
DROP TABLE compute.admissions;

COMMIT;
