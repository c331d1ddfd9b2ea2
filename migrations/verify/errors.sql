-- Verify better_compute:errors on pg

BEGIN;

SELECT code, sqlstate, http_status, meaning FROM compute.error_codes WHERE false;
SELECT 'compute.raise_error(text, text, text, text)'::regprocedure;
SELECT code FROM ops.error_codes WHERE false;

ROLLBACK;
