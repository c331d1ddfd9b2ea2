-- Revert better_compute:limits from pg

BEGIN;

DROP VIEW ops.limits;
DROP FUNCTION compute.limit(text);
DROP TABLE compute.limits;

COMMIT;
