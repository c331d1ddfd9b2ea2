-- compute.place and compute.reserve_hold run generic plans (sql/460_table_statistics.sql): with
-- custom plans PostgreSQL planned three of their statements on every admission (the device lock,
-- the recheck and the bookings INSERT: an array parameter, whose size only a custom plan knows,
-- kept the generic plan looking dearer), about 0.3 ms of planning per admission (docs/capacity.md).
BEGIN;
SELECT plan(2);

SELECT ok(coalesce('plan_cache_mode=force_generic_plan' = ANY (p.proconfig), false), 'compute.place runs generic plans')
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid = 'compute.place(uuid, text, integer, tstzrange, boolean)'::regprocedure;
SELECT ok(coalesce('plan_cache_mode=force_generic_plan' = ANY (p.proconfig), false), 'compute.reserve_hold runs generic plans')
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid = 'compute.reserve_hold(jsonb)'::regprocedure;

SELECT * FROM finish();
ROLLBACK;
