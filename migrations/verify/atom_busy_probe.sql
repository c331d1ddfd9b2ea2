-- Verify better_compute:atom_busy_probe on pg
-- The candidate scan probes each atom's busy summary by its key (OFFSET 0), so it stops early instead of scanning every summary
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint)'::regprocedure)
              LIKE '%s.busy && p_during OFFSET 0)%')::integer;

ROLLBACK;
