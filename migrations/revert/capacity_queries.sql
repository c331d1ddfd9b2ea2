-- Revert better_compute:capacity_queries from pg

BEGIN;

DROP FUNCTION compute.capacity_earliest(uuid, text, integer, interval, timestamptz);
DROP FUNCTION compute.capacity_free(uuid, text, timestamptz, timestamptz);

COMMIT;
