-- Revert better_compute:candidate_scan_walks_atom_busy from pg
-- The candidate scan walks compute.atom_busy's own pack and spread order indexes and reads each atom's busy windows on the row it walks (no probe per atom): atom_busy carries copies of the atom's pool, shape, node rank, GPU index, device, slices, slot and validity, kept by the atoms triggers
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER atoms_atom_busy_update ON compute.atoms;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.atom_busy_atoms_added()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- A new atom (a node's inventory, a layout change) starts with the busy windows its device's
    -- held bookings give it.
    INSERT INTO compute.atom_busy (atom_id, node_id, busy)
    SELECT a.atom_id, a.node_id, compute.atom_busy_of(a, compute.compute_now()) FROM added_atoms AS a;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION compute.atom_busy_mismatches()
 RETURNS TABLE(atom_id uuid, kept tstzmultirange, computed tstzmultirange)
 LANGUAGE sql
 STABLE
AS $function$
    -- Atoms whose kept busy windows differ from those computed from bookings now (both from now on);
    -- none, always (tests/test_atom_busy.py checks it after a concurrent workload).
    SELECT a.atom_id, s.busy * pg_catalog.tstzmultirange(tstzrange(compute.compute_now(), NULL)), c.busy
      FROM compute.atoms AS a
      LEFT JOIN compute.atom_busy AS s ON s.atom_id = a.atom_id
      CROSS JOIN LATERAL (SELECT compute.atom_busy_of(a, compute.compute_now()) AS busy) AS c
     WHERE s.atom_id IS NULL OR s.node_id <> a.node_id
        OR s.busy * pg_catalog.tstzmultirange(tstzrange(compute.compute_now(), NULL)) <> c.busy
$function$;

COMMENT ON FUNCTION compute.atom_busy_mismatches() IS 'Atoms whose compute.atom_busy row is missing or differs from their bookings (never any).';

CREATE OR REPLACE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean, p_skip uuid[], p_limit bigint)
 RETURNS compute.placement_candidate[]
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atoms_pack_order,
    -- atoms_spread_order) and stops after p_limit. Their filter is the same: it spells out
    -- compute.atom_is_schedulable, because calls of it (not inlinable: it holds subqueries) cost a
    -- function call per scanned atom; `valid @> window` is written as bounds so as not to steer the
    -- planner to atoms_disjoint; whether the atom is free is a probe of its compute.atom_busy row by
    -- its key (never of bookings, whose size grows with the pool's history); OFFSET 0 keeps it a
    -- per-atom probe that the scan stops after, instead of a scan of every atom's summary.
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND lower(a.valid) <= lower(p_during) AND (upper_inf(a.valid) OR upper(a.valid) >= upper(p_during))
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = a.device_id AND k.critical)
                   AND NOT EXISTS (SELECT 1 FROM compute.atom_busy AS s WHERE s.atom_id = a.atom_id AND s.busy && p_during OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.device_index, a.node_rank, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND lower(a.valid) <= lower(p_during) AND (upper_inf(a.valid) OR upper(a.valid) >= upper(p_during))
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = a.device_id AND k.critical)
                   AND NOT EXISTS (SELECT 1 FROM compute.atom_busy AS s WHERE s.atom_id = a.atom_id AND s.busy && p_during OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

DROP FUNCTION compute.atom_busy_atoms_changed();

DROP STATISTICS compute.atom_busy_validity;
DROP INDEX compute.atom_busy_spread_order;
DROP INDEX compute.atom_busy_pack_order;
ALTER TABLE compute.atom_busy DROP COLUMN pool_id, DROP COLUMN shape, DROP COLUMN node_rank, DROP COLUMN device_index,
    DROP COLUMN device_id, DROP COLUMN slices, DROP COLUMN slot, DROP COLUMN valid;

COMMIT;
