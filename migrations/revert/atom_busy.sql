-- Revert better_compute:atom_busy from pg
-- Free-capacity bookkeeping: compute.atom_busy keeps each atom's busy windows (trimmed of the past) by statement-level triggers on bookings and atoms; placement's candidate scan and choice read it, never bookings
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER atoms_atom_busy ON compute.atoms;
DROP TRIGGER bookings_atom_busy_insert ON compute.bookings;
DROP TRIGGER bookings_atom_busy_update ON compute.bookings;
DROP TRIGGER bookings_atom_busy_delete ON compute.bookings;
DROP TABLE compute.atom_busy;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.atom_busy_mismatches();

DROP FUNCTION compute.atom_busy_of(compute.atoms,timestamp with time zone);

DROP FUNCTION compute.atom_busy_refresh(uuid[]);

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
    -- compute.atom_is_schedulable and compute.atom_is_free, because calls of those (not inlinable:
    -- they hold subqueries) cost a function call per scanned atom; `valid @> window` is written as
    -- bounds so as not to steer the planner to atoms_disjoint; OFFSET 0 keeps the bookings check a
    -- per-atom probe of bookings_exclusive instead of a join over every booking of the window.
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
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state = 'held'
                                   OFFSET 0)
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
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state = 'held'
                                   OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

CREATE OR REPLACE FUNCTION compute.place_choose(p_candidates compute.placement_candidate[], p_count integer, p_during tstzrange, p_pack boolean, p_same_node boolean)
 RETURNS uuid[]
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN (WITH c AS (
        SELECT x.*,
               CASE WHEN p_count > 1   -- NVLink peers matter only to multi-atom requests
                    THEN (SELECT count(*) FROM pg_catalog.unnest(p_candidates) AS y
                           WHERE y.node_id = x.node_id AND y.device_id <> x.device_id AND y.device_uuid = ANY (x.nvlink_peers))
                    ELSE 0 END AS peer_score
          FROM pg_catalog.unnest(p_candidates) AS x
    ), nodes AS (
        SELECT c.node_id, count(*) AS free, min(c.node_rank) AS rank,
               (SELECT count(*) FROM compute.bookings AS b
                 WHERE b.node_id = c.node_id AND b.during && p_during AND b.state = 'held') AS used
          FROM c GROUP BY c.node_id
    ), ordered_nodes AS (
        SELECT n.node_id, n.free,
               row_number() OVER (ORDER BY n.free >= p_count DESC,                      -- one node that fits, if any
                                           CASE WHEN n.free >= p_count THEN 0 ELSE -n.free END,  -- else fewest nodes
                                           CASE WHEN p_pack THEN -n.used ELSE n.used END,        -- pack or spread
                                           n.rank) AS node_order
          FROM nodes AS n
    ), picked AS (
        SELECT c.atom_id, o.node_order, o.free,
               row_number() OVER (ORDER BY o.node_order, c.peer_score DESC, c.device_index, c.slice0, c.slot) AS k
          FROM c JOIN ordered_nodes AS o USING (node_id)
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM picked WHERE k <= p_count) < p_count THEN NULL
        WHEN p_same_node AND (SELECT max(node_order) FROM picked WHERE k <= p_count) > 1 THEN NULL
        ELSE (SELECT pg_catalog.array_agg(atom_id ORDER BY k) FROM picked WHERE k <= p_count)
    END);
END
$function$;

DROP FUNCTION compute.atom_busy_atoms_added();

DROP FUNCTION compute.atom_busy_bookings_changed();

COMMIT;
