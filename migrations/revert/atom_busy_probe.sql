-- Revert better_compute:atom_busy_probe from pg
-- The candidate scan probes each atom's busy summary by its key (OFFSET 0), so it stops early instead of scanning every summary
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

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
    -- planner to atoms_disjoint; whether the atom is free is a probe of its compute.atom_busy row
    -- (never of bookings, whose size grows with the pool's history).
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
                   AND NOT EXISTS (SELECT 1 FROM compute.atom_busy AS s WHERE s.atom_id = a.atom_id AND s.busy && p_during)
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
                   AND NOT EXISTS (SELECT 1 FROM compute.atom_busy AS s WHERE s.atom_id = a.atom_id AND s.busy && p_during)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

COMMIT;
