-- Revert better_compute:errors from pg

BEGIN;

DROP VIEW ops.error_codes;
DROP FUNCTION compute.raise_error(text, text, text, text);
DROP TABLE compute.error_codes;

COMMIT;
