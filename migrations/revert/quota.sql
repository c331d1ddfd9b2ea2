-- Revert better_compute:quota from pg

BEGIN;

DROP FUNCTION compute.quota_check(uuid, uuid, uuid, tstzrange, integer, numeric, uuid);
DROP FUNCTION compute.month_hours(tstzrange, timestamptz);

COMMIT;
