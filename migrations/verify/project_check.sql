-- Verify better_compute:project_check on pg

BEGIN;

SELECT compute.project_check(NULL, NULL);

ROLLBACK;
