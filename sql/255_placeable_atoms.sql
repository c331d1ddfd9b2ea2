-- Which atoms placement and capacity_free may give: those on a node with no flag (cordoned,
-- draining, quarantined), on a present GPU without a critical condition; the checks of
-- compute.atom_is_schedulable except the window, which each reader adds (the atom's validity and
-- its busy windows). Read from compute.atom_busy, whose rows carry the atom's place in the pool's
-- orders: a view, so that a reader's scan still walks atom_busy_pack_order or
-- atom_busy_spread_order and stops after its limit (the view is flattened into the reader's query).
SET LOCAL ROLE bc_owner;

CREATE VIEW compute.placeable_atoms AS
    SELECT s.atom_id, s.node_id, s.busy, s.pool_id, s.shape, s.node_rank, s.device_index, s.device_id, s.slices, s.slot, s.valid
      FROM compute.atom_busy AS s
     WHERE NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id)
       AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = s.device_id AND NOT x.present)
       AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = s.device_id AND k.critical);
COMMENT ON VIEW compute.placeable_atoms IS
    'Atoms (their compute.atom_busy rows) of flagless nodes on present GPUs without a critical condition: what placement and capacity_free walk.';
