-- Deploy better_compute:placement to pg
-- Snapshot of sql/210_placement.sql when this change was planned.

BEGIN;

-- Placement (DESIGN §6): which atoms a request gets. SQL, in four steps:
--   1. candidates  up to placement_candidates free atoms of the shape, valid for the whole window, on
--                  present GPUs of nodes without flags, in the pool's static order (pack: node by
--                  node; spread: GPU index across nodes), so the scan walks an index and stops early;
--   2. choose      the fewest nodes: one node that fits the whole request if any (pack: the most used
--                  such node, spread: the least used), NVLink peers first within the node; otherwise
--                  the nodes with the most free atoms first;
--   3. lock        the chosen devices FOR UPDATE SKIP LOCKED in device_id order: a concurrent
--                  placement skips them instead of waiting, so placements never deadlock;
--   4. recheck     with a fresh snapshot (READ COMMITTED) that the chosen atoms are still free.
-- A device a concurrent placement holds is left out and steps 1-4 run again (3 attempts).
SET LOCAL ROLE bc_owner;

CREATE TYPE compute.placement_candidate AS (
    atom_id      uuid,
    node_id      uuid,
    device_id    uuid,
    device_uuid  text,
    nvlink_peers text[],
    node_rank    bigint,
    device_index integer,
    slice0       integer,
    slot         integer
);

CREATE FUNCTION compute.atom_is_free(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM compute.bookings AS b
         WHERE b.site_id = p_atom.site_id AND b.device_id = p_atom.device_id
           AND b.slices && p_atom.slices AND b.shares && p_atom.shares AND b.during && p_during
           AND b.state IN ('provisional', 'active'))
$$;
COMMENT ON FUNCTION compute.atom_is_free(compute.atoms, tstzrange) IS 'No live booking overlaps the atom''s slices and shares during the window.';

CREATE FUNCTION compute.atom_is_schedulable(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_atom.valid @> p_during
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_atom.node_id)
       AND EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.device_id = p_atom.device_id AND d.present)
$$;
COMMENT ON FUNCTION compute.atom_is_schedulable(compute.atoms, tstzrange) IS 'Valid for the whole window, on a present GPU of a node without flags.';

CREATE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean,
                                         p_skip uuid[], p_limit bigint)
RETURNS compute.placement_candidate[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atoms_pack_order, atoms_spread_order).
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)
                 ORDER BY a.pool_id, a.shape, a.device_index, a.node_rank, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$$;
COMMENT ON FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint) IS
    'Step 1 of placement: free, schedulable atoms of the shape in the pool''s static order, at most p_limit.';

CREATE FUNCTION compute.place_choose(p_candidates compute.placement_candidate[], p_count integer, p_during tstzrange,
                                     p_pack boolean, p_same_node boolean)
RETURNS uuid[]
LANGUAGE sql STABLE
AS $$
    WITH c AS (
        SELECT x.*,
               (SELECT count(*) FROM pg_catalog.unnest(p_candidates) AS y
                 WHERE y.node_id = x.node_id AND y.device_id <> x.device_id AND y.device_uuid = ANY (x.nvlink_peers)) AS peer_score
          FROM pg_catalog.unnest(p_candidates) AS x
    ), nodes AS (
        SELECT c.node_id, count(*) AS free, min(c.node_rank) AS rank,
               (SELECT count(*) FROM compute.bookings AS b
                 WHERE b.node_id = c.node_id AND b.during && p_during AND b.state IN ('provisional', 'active')) AS used
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
    END
$$;
COMMENT ON FUNCTION compute.place_choose(compute.placement_candidate[], integer, tstzrange, boolean, boolean) IS
    'Step 2 of placement: the atoms to take, or NULL when the candidates cannot meet the request.';

CREATE FUNCTION compute.place_shortfall(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean)
RETURNS text
LANGUAGE sql STABLE
AS $$
    -- Why a request cannot be placed, for the HINT: counted over the whole pool (the slow path).
    WITH a AS (
        SELECT compute.atom_is_schedulable(x, p_during) AS schedulable,
               compute.atom_is_schedulable(x, p_during) AND compute.atom_is_free(x, p_during) AS free, x.node_id
          FROM compute.atoms AS x
         WHERE x.pool_id = p_pool_id AND x.shape = p_shape AND x.valid && p_during
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM a) = 0 THEN
            pg_catalog.format('No GPU of this pool is laid out as %s during the window.', p_shape)
        WHEN (SELECT count(*) FILTER (WHERE schedulable) FROM a) < p_count THEN
            pg_catalog.format('Only %s atoms of shape %s are schedulable for the whole window (%s more are on cordoned, draining or quarantined nodes, absent GPUs, or change layout within it).',
                              (SELECT count(*) FILTER (WHERE schedulable) FROM a), p_shape,
                              (SELECT count(*) FILTER (WHERE NOT schedulable) FROM a))
        WHEN (SELECT count(*) FILTER (WHERE free) FROM a) < p_count THEN
            pg_catalog.format('All busy: only %s of %s schedulable atoms of shape %s are free for the whole window; compute.capacity_earliest finds the next window.',
                              (SELECT count(*) FILTER (WHERE free) FROM a), (SELECT count(*) FILTER (WHERE schedulable) FROM a), p_shape)
        WHEN p_same_node THEN
            pg_catalog.format('No single node has %s free atoms of shape %s for the window (at most %s on one node); drop same_node or ask for fewer.',
                              p_count, p_shape, (SELECT max(n) FROM (SELECT count(*) AS n FROM a WHERE free GROUP BY node_id) AS per_node))
        ELSE 'Concurrent reservations hold the free atoms right now; retry.'
    END
$$;
COMMENT ON FUNCTION compute.place_shortfall(uuid, text, integer, tstzrange, boolean) IS 'Why a placement failed, in words for the HINT.';

CREATE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
-- Lock order: the chosen devices, FOR UPDATE SKIP LOCKED, in device_id order (never waits).
DECLARE
    v_pack       boolean;
    v_skip       uuid[] := '{}';
    v_candidates compute.placement_candidate[];
    v_chosen     uuid[];
    v_devices    uuid[];
    v_locked     uuid[];
    v_attempt    integer;
BEGIN
    SELECT p.placement_policy = 'pack' INTO v_pack FROM compute.pools AS p WHERE p.pool_id = p_pool_id;
    IF v_pack IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Pass an existing pool.');
    END IF;
    FOR v_attempt IN 1..3 LOOP
        -- 1-2. candidates and choice.
        v_candidates := compute.place_candidates(p_pool_id, p_shape, p_during, NOT v_pack, v_skip,
                                                 greatest(compute.limit('placement_candidates'), p_count));
        v_chosen := compute.place_choose(v_candidates, p_count, p_during, v_pack, p_same_node);
        EXIT WHEN v_chosen IS NULL;
        SELECT pg_catalog.array_agg(DISTINCT a.device_id) INTO v_devices FROM compute.atoms AS a WHERE a.atom_id = ANY (v_chosen);

        -- 3. lock the devices; a device a concurrent placement holds is skipped, never waited for.
        SELECT pg_catalog.array_agg(l.device_id) INTO v_locked
          FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                 ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;

        -- 4. recheck with this statement's fresh snapshot.
        IF pg_catalog.cardinality(v_locked) = pg_catalog.cardinality(v_devices)
           AND NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                            WHERE a.atom_id = ANY (v_chosen)
                              AND NOT (compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during))) THEN
            RETURN v_chosen;
        END IF;
        v_skip := v_skip || v_devices;
    END LOOP;
    PERFORM compute.raise_error('CAPACITY_CONFLICT',
        pg_catalog.format('cannot place %s x %s in pool %s during %s', p_count, p_shape, p_pool_id, p_during),
        compute.place_shortfall(p_pool_id, p_shape, p_count, p_during, p_same_node));
END
$$;
COMMENT ON FUNCTION compute.place(uuid, text, integer, tstzrange, boolean) IS
    'Choose and lock atoms for a request (see the file header); CAPACITY_CONFLICT with the reason in the HINT.';

COMMIT;
