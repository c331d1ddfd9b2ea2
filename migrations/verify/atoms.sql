-- Verify better_compute:atoms on pg

BEGIN;

SELECT atom_id, shape, slices, shares, valid, gpu_fraction FROM compute.atoms WHERE false;
SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conname = 'atoms_disjoint' AND contype = 'x';
SELECT 'compute.layout_atoms(uuid, text)'::regprocedure, 'compute.device_set_layout(uuid, text, timestamptz)'::regprocedure;

ROLLBACK;
