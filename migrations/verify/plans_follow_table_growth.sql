-- Verify better_compute:plans_follow_table_growth on pg

BEGIN;

SELECT 'worker_api.tables_analyze()'::regprocedure;
SELECT 1/count(*) FROM compute.work_periodic WHERE kind = 'tables.analyze';
SELECT 1/count(*) FROM compute.limits WHERE name = 'analyze_changed_rows';
-- A table never analysed that gained analyze_changed_rows rows is analysed (and then not again).
CREATE TABLE compute.verify_growth (n integer);
INSERT INTO compute.verify_growth SELECT generate_series(1, 200);
SELECT pg_catalog.pg_stat_force_next_flush();
SELECT 1/(compute.tables_analyze() >= 1)::integer;
SELECT 1/(reltuples = 200)::integer FROM pg_catalog.pg_class WHERE oid = 'compute.verify_growth'::regclass;

ROLLBACK;
