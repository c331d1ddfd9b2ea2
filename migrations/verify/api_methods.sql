-- Verify better_compute:api_methods on pg

BEGIN;

SELECT 1/(count(*) >= 30)::integer FROM api.methods;

ROLLBACK;
