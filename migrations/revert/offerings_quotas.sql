-- Revert better_compute:offerings_quotas from pg

BEGIN;

DROP FUNCTION compute.quota_set(uuid, uuid, uuid, integer, numeric);
DROP FUNCTION compute.offering_create(uuid, text, integer, interval, text);
DROP TABLE compute.quotas;
DROP TABLE compute.offerings;

COMMIT;
