-- Verify better_compute:limits on pg

BEGIN;

SELECT compute.limit('http_body_bytes');
SELECT name FROM ops.limits WHERE false;

ROLLBACK;
