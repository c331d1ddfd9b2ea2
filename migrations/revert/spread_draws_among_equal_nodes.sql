-- Revert better_compute:spread_draws_among_equal_nodes from pg
-- place_choose: a spread pool takes equally used nodes in an order drawn per placement (pack keeps pool order); one seed per call
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

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
               (SELECT count(*) FROM compute.atom_busy AS s WHERE s.node_id = c.node_id AND s.busy && p_during) AS used
          FROM c GROUP BY c.node_id
    ), ordered_nodes AS (
        SELECT n.node_id, n.free,
               row_number() OVER (ORDER BY n.free >= p_count DESC,                      -- one node that fits, if any
                                           CASE WHEN n.free >= p_count THEN 0 ELSE -n.free END,  -- else fewest nodes
                                           CASE WHEN p_pack THEN -n.used ELSE n.used END,        -- pack or spread
                                           n.rank) AS node_order
          FROM nodes AS n
    ), picked AS (
        -- Within the node, GPUs that are equal for the request (as many NVLink peers) in an order
        -- drawn for this call, so that concurrent placements on one node stop reaching for the same
        -- first free GPU (each then skips the other's locked GPU and chooses again); within a GPU, its
        -- lowest placement and slot first.
        SELECT c.atom_id, o.node_order, o.free,
               row_number() OVER (ORDER BY o.node_order, c.peer_score DESC,
                                           pg_catalog.hashtextextended(c.device_id::text, s.seed), c.slice0, c.slot) AS k
          FROM c JOIN ordered_nodes AS o USING (node_id)
         CROSS JOIN (SELECT (pg_catalog.random() * 9007199254740991)::bigint AS seed) AS s
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM picked WHERE k <= p_count) < p_count THEN NULL
        WHEN p_same_node AND (SELECT max(node_order) FROM picked WHERE k <= p_count) > 1 THEN NULL
        ELSE (SELECT pg_catalog.array_agg(atom_id ORDER BY k) FROM picked WHERE k <= p_count)
    END);
END
$function$;

COMMIT;
