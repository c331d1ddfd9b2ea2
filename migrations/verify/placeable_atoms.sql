-- Verify better_compute:placeable_atoms on pg
-- compute.placeable_atoms: the atoms placement may give (flagless node, present GPU, no critical condition) from atom_busy, read by the candidate scan and capacity_free; capacity_free now leaves out a GPU with a critical condition, as placement does
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT atom_id, node_id, busy, pool_id, shape, node_rank, device_index, device_id, slices, slot, valid
  FROM compute.placeable_atoms WHERE false;

ROLLBACK;
