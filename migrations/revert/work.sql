-- Revert better_compute:work from pg

BEGIN;

DROP FUNCTION ops.work_retry(bigint);
DROP VIEW ops.work_dead;
DROP VIEW ops.work;
DROP FUNCTION worker_api.work_prune();
DROP FUNCTION worker_api.work_ensure_periodic();
DROP FUNCTION worker_api.work_poke(text, text, jsonb, double precision);
DROP FUNCTION worker_api.work_extend(bigint, bigint, double precision);
DROP FUNCTION worker_api.work_fail(bigint, bigint, text);
DROP FUNCTION worker_api.work_complete(bigint, bigint, double precision);
DROP FUNCTION worker_api.work_claim(text, integer, double precision, text[]);
DROP FUNCTION compute.work_retry(bigint);
DROP FUNCTION compute.work_prune();
DROP FUNCTION compute.work_ensure_periodic();
DROP FUNCTION compute.work_extend(bigint, bigint, interval);
DROP FUNCTION compute.work_fail(bigint, bigint, text);
DROP FUNCTION compute.work_complete(bigint, bigint, timestamptz);
DROP FUNCTION compute.work_fenced(bigint, bigint);
DROP FUNCTION compute.work_claim(text, integer, interval, text[]);
DROP TYPE compute.work_claim;
DROP FUNCTION compute.work_poke(text, text, jsonb, timestamptz, integer);
DROP TABLE compute.work_periodic;
DROP TABLE compute.work;

COMMIT;
