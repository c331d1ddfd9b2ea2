-- Verify better_compute:atom_busy on pg
-- Free-capacity bookkeeping: compute.atom_busy keeps each atom's busy windows (trimmed of the past) by statement-level triggers on bookings and atoms; placement's candidate scan and choice read it, never bookings
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.atom_busy_atoms_added()'::regprocedure;

SELECT 'compute.atom_busy_bookings_changed()'::regprocedure;

SELECT 'compute.atom_busy_mismatches()'::regprocedure;

SELECT 'compute.atom_busy_of(compute.atoms,timestamp with time zone)'::regprocedure;

SELECT 'compute.atom_busy_refresh(uuid[])'::regprocedure;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.atom_busy'::regclass AND conname = 'atom_busy_atom_id_fkey';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.atom_busy'::regclass AND conname = 'atom_busy_pkey';

SELECT 1 / (NOT EXISTS (SELECT FROM compute.atom_busy_mismatches()))::int;

ROLLBACK;
