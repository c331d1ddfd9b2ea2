-- The candidate scan runs its generic plan (sql/460_table_statistics.sql): its LIMIT is a parameter
-- there, so the planner walks the pool's order index and stops after p_limit free atoms. A custom
-- plan knows the shape: for MIG in a spread pool (500 MIG atoms of 3,000 in a pool of a 1,000-node
-- fleet, 200 held) it chose a bitmap scan of all 500 plus a sort (2.8 ms, 500 probes) where the
-- generic plan walks atoms_spread_order (1.5 ms, 264 probes) (docs/capacity.md, "Performance notes").
BEGIN;
SELECT plan(1);

SELECT ok('plan_cache_mode=force_generic_plan' = ANY (p.proconfig), 'compute.place_candidates runs its generic plan')
  FROM pg_catalog.pg_proc AS p
 WHERE p.oid = 'compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint)'::regprocedure;

SELECT * FROM finish();
ROLLBACK;
