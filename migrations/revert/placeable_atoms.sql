-- Revert better_compute:placeable_atoms from pg
-- compute.placeable_atoms: the atoms placement may give (flagless node, present GPU, no critical condition) from atom_busy, read by the candidate scan and capacity_free; capacity_free now leaves out a GPU with a critical condition, as placement does
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamp with time zone, p_end timestamp with time zone)
 RETURNS TABLE(node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    IF p_end <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the window ended at %s', p_end),
            'Ask for a window that ends after now: what is free can still be booked.');
    END IF;
    PERFORM compute.pool_get(p_pool_id);
    -- The schedulable atoms of the shape whose busy windows (compute.atom_busy, kept by the bookings
    -- triggers, as placement reads them) leave the window free: one walk of the pool's atoms of the
    -- shape, never the bookings, whose table grows with the pool's history. A window's past part
    -- cannot be booked and is not asked about (the summaries hold no past); the checks of
    -- compute.atom_is_schedulable are spelled out (no per-atom function call).
    RETURN QUERY
    WITH free AS (
        SELECT s.node_id, s.atom_id, s.device_index, s.slices, s.slot
          FROM compute.atom_busy AS s
         WHERE s.pool_id = p_pool_id AND s.shape = p_shape
           AND lower(s.valid) <= p_start AND (upper_inf(s.valid) OR upper(s.valid) >= p_end)
           AND NOT (s.busy && tstzrange(greatest(p_start, v_now), p_end))
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = s.device_id AND NOT x.present)
    ), per_node AS (
        SELECT f.node_id, count(*)::integer AS free_atoms,
               pg_catalog.array_agg(f.atom_id ORDER BY f.device_index, f.slices, f.slot) AS atom_ids
          FROM free AS f GROUP BY f.node_id
    )
    SELECT p.node_id, n.name, p.free_atoms, p.atom_ids
      FROM per_node AS p JOIN compute.nodes AS n ON n.node_id = p.node_id
     ORDER BY n.rank;
END
$function$;

CREATE OR REPLACE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean, p_skip uuid[], p_limit bigint)
 RETURNS compute.placement_candidate[]
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atom_busy_pack_order,
    -- atom_busy_spread_order) and stops after p_limit. Their filter is the same: it spells out
    -- compute.atom_is_schedulable, because calls of it (not inlinable: it holds subqueries) cost a
    -- function call per scanned atom; `valid @> window` is written as bounds (statistics on them:
    -- compute.atom_busy_validity); whether the atom is free is its busy windows, on the very row
    -- the walk reads (never bookings, whose size grows with the pool's history; nor a probe per
    -- atom, which a filled pool's walk repeats for every busy atom ahead of the free ones).
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT s.atom_id, s.node_id, s.device_id, s.node_rank, s.device_index, s.slices, s.slot FROM compute.atom_busy AS s
                 WHERE s.pool_id = p_pool_id AND s.shape = p_shape AND NOT (s.device_id = ANY (p_skip))
                   AND lower(s.valid) <= lower(p_during) AND (upper_inf(s.valid) OR upper(s.valid) >= upper(p_during))
                   AND NOT (s.busy && p_during)
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = s.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = s.device_id AND k.critical)
                 ORDER BY s.pool_id, s.shape, s.device_index, s.node_rank, s.slices, s.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT s.atom_id, s.node_id, s.device_id, s.node_rank, s.device_index, s.slices, s.slot FROM compute.atom_busy AS s
                 WHERE s.pool_id = p_pool_id AND s.shape = p_shape AND NOT (s.device_id = ANY (p_skip))
                   AND lower(s.valid) <= lower(p_during) AND (upper_inf(s.valid) OR upper(s.valid) >= upper(p_during))
                   AND NOT (s.busy && p_during)
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = s.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = s.device_id AND k.critical)
                 ORDER BY s.pool_id, s.shape, s.node_rank, s.device_index, s.slices, s.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

-- By hand: the view, once no function reads it.
DROP VIEW compute.placeable_atoms;

COMMIT;
