-- Verify better_compute:plans_follow_table_growth on pg

BEGIN;

SELECT 'worker_api.tables_analyze()'::regprocedure;
SELECT 1/count(*) FROM compute.work_periodic WHERE kind = 'tables.analyze';
SELECT 1/count(*) FROM compute.limits WHERE name = 'analyze_changed_rows';
SELECT 1/count(*) FROM pg_catalog.pg_statistic_ext WHERE stxname = 'atoms_validity' AND stxrelid = 'compute.atoms'::regclass;
SELECT 1/count(*) FROM pg_catalog.pg_proc
 WHERE oid = 'compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint)'::regprocedure
   AND 'plan_cache_mode=force_generic_plan' = ANY (proconfig);
-- It runs (what it analyses depends on counts a transaction cannot see change: tests/test_plans_follow_growth.py).
SELECT 1/(compute.tables_analyze() >= 0)::integer;

ROLLBACK;
