-- Verify better_compute:candidate_scan_walks_atom_busy on pg
-- The candidate scan walks compute.atom_busy's own pack and spread order indexes and reads each atom's busy windows on the row it walks (no probe per atom): atom_busy carries copies of the atom's pool, shape, node rank, GPU index, device, slices, slot and validity, kept by the atoms triggers
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.atom_busy_atoms_changed()'::regprocedure;
SELECT pool_id, shape, node_rank, device_index, device_id, slices, slot, valid FROM compute.atom_busy WHERE false;
SELECT 'compute.atom_busy_pack_order'::regclass, 'compute.atom_busy_spread_order'::regclass;
SELECT 1 / count(*)::int FROM pg_catalog.pg_trigger WHERE tgname = 'atoms_atom_busy_update' AND tgrelid = 'compute.atoms'::regclass;

ROLLBACK;
