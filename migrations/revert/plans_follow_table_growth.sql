-- Revert better_compute:plans_follow_table_growth from pg

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint) RESET plan_cache_mode;
DROP STATISTICS compute.atoms_validity;
DROP FUNCTION worker_api.tables_analyze();
DROP FUNCTION compute.tables_analyze();
DELETE FROM compute.work WHERE kind = 'tables.analyze';
DELETE FROM compute.work_periodic WHERE kind = 'tables.analyze';
DELETE FROM compute.limits WHERE name = 'analyze_changed_rows';

COMMIT;
