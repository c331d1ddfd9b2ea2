-- Verify better_compute:admission_bounds on pg

BEGIN;

SELECT compute.limit('admissions_pending_per_tenant'), compute.limit('admissions_pending_per_credential');
SELECT compute.admission_slot(pg_catalog.gen_random_uuid(), NULL) = 1;
SELECT 1 / (SELECT count(*)::integer FROM api.methods WHERE check_function IS NOT NULL AND method = 'reservations.extend');
-- A credential fingerprint that is not a SHA-256 is refused before anything else.
DO $$
BEGIN
    PERFORM api.prepare('sites.create', pg_catalog.gen_random_uuid(), '{"name": "verify"}', 'not-a-sha256');
    PERFORM compute.raise_error('INVALID_ARGUMENT', 'api.prepare took a credential that is not a SHA-256', 'Deploy admission_bounds.');
EXCEPTION WHEN SQLSTATE 'BC400' THEN
    NULL;
END
$$;

ROLLBACK;
