-- Verify better_compute:quota on pg

BEGIN;

SELECT 'compute.quota_check(uuid, uuid, uuid, tstzrange, integer, numeric, uuid)'::regprocedure,
       compute.month_hours(tstzrange('2030-01-31 00:00+00', '2030-02-01 12:00+00'), '2030-02-01 00:00+00');

ROLLBACK;
