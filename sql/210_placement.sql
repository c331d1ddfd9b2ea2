-- Placement (docs/architecture.md §6): which atoms a request gets. SQL, in four steps:
--   1. candidates  up to placement_candidates free atoms (compute.atom_busy) of the shape, valid for the whole window, on
--                  present GPUs without a critical condition (compute.device_conditions: not converged
--                  to the layout valid now, MIG failed, a fault) of nodes without flags, in the pool's static order (pack: node by
--                  node; spread: GPU index across nodes), so the scan walks an index and stops early;
--   2. choose      the fewest nodes: one node that fits the whole request if any (pack: the most used
--                  such node, spread: the least used, by atoms busy in the window: compute.atom_busy;
--                  equally used nodes: pack in pool order, spread in a random order),
--                  NVLink peers first within the node, equal GPUs in a random order; otherwise
--                  the nodes with the most free atoms first;
--   3. lock        the chosen devices FOR UPDATE SKIP LOCKED in device_id order: a concurrent
--                  placement skips them instead of waiting, so placements never deadlock;
--   4. recheck     with a fresh snapshot (READ COMMITTED) that the chosen atoms are still free
--                  (compute.atom_held: bookings through a btree, never the GiST index).
-- A device lost to a concurrent placement (locked, or its atoms taken since the scan) is left out and
-- steps 2-4 run again on the candidates left; when those cannot meet the request, step 1 walks on
-- past the lost devices. A request fails only when the free atoms that remain cannot meet it, or are
-- all held by concurrent placements right now.
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

-- Free-capacity bookkeeping: each atom's busy windows from now on, so that placement (steps 1 and 2)
-- never reads bookings to find free atoms. An atom is busy while a held booking of any atom of its
-- device that shares a slice and a share (itself, its whole GPU, its MIG instances, ...) holds it;
-- the summary is trimmed of the past when it is written. Statement-level triggers keep it: on
-- bookings (every path that adds, ends, extends, voids or moves one) and on atoms (a layout change
-- adds atoms and changes validities; deleted ones take their row along). It only advises: the
-- recheck under the device lock (compute.atom_held, bookings through a btree) and the exclusion
-- constraint decide.
-- The row also carries the atom's place in the pool's two orders and its validity, copied from
-- compute.atoms: the candidate scan walks this table's order indexes and reads each atom's busy
-- windows on the tuple it walks. Probing a summary per atom cost three buffer hits per atom, and
-- on a filled pool the walk passes hundreds of busy atoms (docs/capacity.md, "Performance notes").
CREATE TABLE compute.atom_busy (
    atom_id      uuid CONSTRAINT atom_busy_pkey PRIMARY KEY CONSTRAINT atom_busy_atom_id_fkey REFERENCES compute.atoms ON DELETE CASCADE,
    node_id      uuid NOT NULL,
    busy         tstzmultirange NOT NULL,
    pool_id      uuid NOT NULL,      -- copies of the atom's columns (compute.atom_busy_mismatches checks them)
    shape        text NOT NULL,
    node_rank    bigint NOT NULL,
    device_index integer NOT NULL,
    device_id    uuid NOT NULL,
    slices       int4range NOT NULL,
    slot         integer,
    valid        tstzrange NOT NULL
);
CREATE INDEX atom_busy_node ON compute.atom_busy (node_id);
CREATE INDEX atom_busy_pack_order ON compute.atom_busy (pool_id, shape, node_rank, device_index, slices, slot);
CREATE INDEX atom_busy_spread_order ON compute.atom_busy (pool_id, shape, device_index, node_rank, slices, slot);
COMMENT ON TABLE compute.atom_busy IS 'Per atom, the windows from now on in which a held booking covers a slice and share of it (placement reads this, not bookings).';

CREATE FUNCTION compute.atom_busy_of(p_atom compute.atoms, p_from timestamptz)
RETURNS tstzmultirange
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- The held bookings of the device's atoms that overlap this one, from p_from on (bookings_atom_live).
    RETURN (SELECT coalesce(pg_catalog.range_agg(b.during * tstzrange(p_from, NULL)), '{}')
              FROM compute.atoms AS x
              JOIN compute.bookings AS b ON b.atom_id = x.atom_id
             WHERE x.device_id = p_atom.device_id AND x.slices && p_atom.slices AND x.shares && p_atom.shares
               AND b.state = 'held' AND upper(b.during) > p_from);
END
$$;
COMMENT ON FUNCTION compute.atom_busy_of(compute.atoms, timestamptz) IS 'An atom''s busy windows from p_from on, computed from bookings (what compute.atom_busy holds).';

CREATE FUNCTION compute.atom_busy_refresh(p_atoms uuid[])
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the atom_busy rows, in atom_id order (after whatever the caller holds: devices, reservation).
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    -- Lock the rows first, then recompute in a second statement: its snapshot (READ COMMITTED) is
    -- taken once the locks are held, so it sees every booking change committed by a transaction
    -- that refreshed these rows before us; an UPDATE alone would recompute from the older snapshot.
    PERFORM 1 FROM compute.atom_busy AS s WHERE s.atom_id = ANY (p_atoms) ORDER BY s.atom_id FOR UPDATE;
    UPDATE compute.atom_busy AS s SET busy = compute.atom_busy_of(a, v_now)
      FROM compute.atoms AS a
     WHERE a.atom_id = s.atom_id AND s.atom_id = ANY (p_atoms);
END
$$;
COMMENT ON FUNCTION compute.atom_busy_refresh(uuid[]) IS 'Recompute the busy windows of these atoms (locked in atom_id order).';

CREATE FUNCTION compute.atom_busy_bookings_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
-- Lock order: the atom_busy rows, in atom_id order (as compute.atom_busy_refresh).
DECLARE
    v_atoms uuid[];
    v_from  timestamptz;
BEGIN
    -- The atoms a changed held booking covers (before or after the change). Three statements: a
    -- transition table exists only for the events that have it.
    IF TG_OP = 'INSERT' THEN
        -- Added holds only add busy time, so each covered atom's windows grow by theirs: exact,
        -- with no read of bookings (an end or a move, below, may free time that another hold still
        -- covers, so those recompute). The rows are locked first, in atom_id order; the UPDATE then
        -- applies the union to their newest versions, so a concurrent refresh is never lost.
        v_from := compute.compute_now();
        PERFORM 1 FROM compute.atom_busy AS s
         WHERE s.atom_id IN (SELECT x.atom_id FROM changed_bookings AS c
                               JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
                              WHERE c.state = 'held')
         ORDER BY s.atom_id FOR UPDATE;
        UPDATE compute.atom_busy AS s
           SET busy = s.busy * pg_catalog.tstzmultirange(tstzrange(v_from, NULL)) + w.busy
          FROM (SELECT x.atom_id, pg_catalog.range_agg(c.during * tstzrange(v_from, NULL)) AS busy
                  FROM changed_bookings AS c
                  JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
                 WHERE c.state = 'held'
                 GROUP BY x.atom_id) AS w
         WHERE s.atom_id = w.atom_id;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT pg_catalog.array_agg(DISTINCT x.atom_id) INTO v_atoms
          FROM previous_bookings AS c
          JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
         WHERE c.state = 'held';
    ELSE
        SELECT pg_catalog.array_agg(DISTINCT x.atom_id) INTO v_atoms
          FROM changed_bookings AS c JOIN previous_bookings AS p USING (booking_id)
          CROSS JOIN LATERAL (VALUES (c.device_id, c.slices, c.shares, c.state), (p.device_id, p.slices, p.shares, p.state))
                             AS v(device_id, slices, shares, state)
          JOIN compute.atoms AS x ON x.device_id = v.device_id AND x.slices && v.slices AND x.shares && v.shares
         WHERE v.state = 'held' AND (c.state, c.during, c.atom_id) IS DISTINCT FROM (p.state, p.during, p.atom_id);
    END IF;
    IF v_atoms IS NOT NULL THEN
        PERFORM compute.atom_busy_refresh(v_atoms);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.atom_busy_bookings_changed() IS 'Keep compute.atom_busy: add inserted holds'' windows; recompute the atoms whose held bookings ended, moved or were deleted.';
CREATE TRIGGER bookings_atom_busy_insert AFTER INSERT ON compute.bookings
    REFERENCING NEW TABLE AS changed_bookings FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();
CREATE TRIGGER bookings_atom_busy_update AFTER UPDATE ON compute.bookings
    REFERENCING OLD TABLE AS previous_bookings NEW TABLE AS changed_bookings
    FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();
CREATE TRIGGER bookings_atom_busy_delete AFTER DELETE ON compute.bookings
    REFERENCING OLD TABLE AS previous_bookings FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();

CREATE FUNCTION compute.atom_busy_atoms_added()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- A new atom (a node's inventory, a layout change) starts with the busy windows its device's
    -- held bookings give it, and its place in the pool's orders.
    INSERT INTO compute.atom_busy (atom_id, node_id, busy, pool_id, shape, node_rank, device_index, device_id, slices, slot, valid)
    SELECT a.atom_id, a.node_id, compute.atom_busy_of(a, compute.compute_now()),
           a.pool_id, a.shape, a.node_rank, a.device_index, a.device_id, a.slices, a.slot, a.valid
      FROM added_atoms AS a;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.atom_busy_atoms_added() IS 'Keep compute.atom_busy: a row for each new atom.';
CREATE TRIGGER atoms_atom_busy AFTER INSERT ON compute.atoms
    REFERENCING NEW TABLE AS added_atoms FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_atoms_added();

CREATE FUNCTION compute.atom_busy_atoms_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
-- Lock order: the atom_busy rows, in atom_id order (as the bookings triggers).
BEGIN
    -- A layout change moves atoms' validity (the only column of an atom that changes): the copy
    -- follows in the same transaction.
    PERFORM 1 FROM compute.atom_busy AS s
     WHERE s.atom_id IN (SELECT c.atom_id FROM changed_atoms AS c)
     ORDER BY s.atom_id FOR UPDATE;
    UPDATE compute.atom_busy AS s SET valid = c.valid
      FROM changed_atoms AS c
     WHERE s.atom_id = c.atom_id AND s.valid IS DISTINCT FROM c.valid;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.atom_busy_atoms_changed() IS 'Keep compute.atom_busy: an atom''s validity copied when it changes.';
CREATE TRIGGER atoms_atom_busy_update AFTER UPDATE ON compute.atoms
    REFERENCING NEW TABLE AS changed_atoms FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_atoms_changed();

CREATE FUNCTION compute.atom_busy_mismatches()
RETURNS TABLE (atom_id uuid, kept tstzmultirange, computed tstzmultirange)
LANGUAGE sql STABLE
AS $$
    -- Atoms whose kept busy windows differ from those computed from bookings now (both from now on),
    -- or whose copied columns differ from the atom's; none, always (tests/test_reservation_concurrency.py
    -- checks it during and after a concurrent workload).
    SELECT a.atom_id, s.busy * pg_catalog.tstzmultirange(tstzrange(compute.compute_now(), NULL)), c.busy
      FROM compute.atoms AS a
      LEFT JOIN compute.atom_busy AS s ON s.atom_id = a.atom_id
      CROSS JOIN LATERAL (SELECT compute.atom_busy_of(a, compute.compute_now()) AS busy) AS c
     WHERE s.atom_id IS NULL
        OR (s.node_id, s.pool_id, s.shape, s.node_rank, s.device_index, s.device_id, s.slices, s.slot, s.valid)
           IS DISTINCT FROM (a.node_id, a.pool_id, a.shape, a.node_rank, a.device_index, a.device_id, a.slices, a.slot, a.valid)
        OR s.busy * pg_catalog.tstzmultirange(tstzrange(compute.compute_now(), NULL)) <> c.busy
$$;
COMMENT ON FUNCTION compute.atom_busy_mismatches() IS 'Atoms whose compute.atom_busy row is missing or differs from their bookings or from the atom (never any).';

-- The helpers below are PL/pgSQL because a SQL function holding a subquery is not inlined and is
-- planned again on every call; PL/pgSQL keeps its plans for the session.
CREATE FUNCTION compute.atom_held(p_atom compute.atoms, p_during tstzrange, p_excluding uuid)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- The check placement (step 4) and extend make under the device lock, so it must not miss a row:
    -- it finds the device's atoms (a table written only when inventory or layouts change), then
    -- their live bookings through the btree bookings_atom_live, never through the GiST index
    -- bookings_exclusive. Under concurrent writes to a young, growing bookings table,
    -- PostgreSQL 15's GiST scans of that index were seen to miss committed live bookings for
    -- seconds, and its exclusion check to let an overlapping one in (docs/capacity.md). A booking
    -- holds exactly its atom's device, slices and shares (compute.booking_matches_atom), so the
    -- bookings that overlap p_atom are the live bookings of the device's atoms that overlap it.
    RETURN EXISTS (
        SELECT 1 FROM compute.atoms AS x
          JOIN compute.bookings AS b ON b.atom_id = x.atom_id
         WHERE x.device_id = p_atom.device_id AND x.slices && p_atom.slices AND x.shares && p_atom.shares
           AND b.state = 'held' AND b.reservation_id IS DISTINCT FROM p_excluding
           AND upper(b.during) > lower(p_during) AND lower(b.during) < upper(p_during));
END
$$;
COMMENT ON FUNCTION compute.atom_held(compute.atoms, tstzrange, uuid) IS
    'A live booking (of a reservation other than p_excluding) holds a slice and share of the atom during the window; never reads bookings_exclusive.';

CREATE FUNCTION compute.atom_is_free(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN NOT compute.atom_held(p_atom, p_during, NULL);
END
$$;
COMMENT ON FUNCTION compute.atom_is_free(compute.atoms, tstzrange) IS 'No live booking overlaps the atom''s slices and shares during the window.';

CREATE FUNCTION compute.atom_is_schedulable(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN p_atom.valid @> p_during
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_atom.node_id)
       AND EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.device_id = p_atom.device_id AND d.present)
       AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = p_atom.device_id AND k.critical);
END
$$;
COMMENT ON FUNCTION compute.atom_is_schedulable(compute.atoms, tstzrange) IS
    'Valid for the whole window, on a present GPU without a critical condition, of a node without flags.';

CREATE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean,
                                         p_skip uuid[], p_limit bigint)
RETURNS compute.placement_candidate[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atom_busy_pack_order,
    -- atom_busy_spread_order) and stops after p_limit. Their filter is the same: compute.placeable_atoms
    -- (the checks of compute.atom_is_schedulable, spelled out in a view rather than called per scanned
    -- atom: not inlinable, it holds subqueries) and the window: `valid @> window` written as bounds
    -- (statistics on them: compute.atom_busy_validity); whether the atom is free is its busy windows,
    -- on the very row the walk reads (never bookings, whose size grows with the pool's history; nor
    -- a probe per atom, which a filled pool's walk repeats for every busy atom ahead of the free ones).
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT s.atom_id, s.node_id, s.device_id, s.node_rank, s.device_index, s.slices, s.slot FROM compute.placeable_atoms AS s
                 WHERE s.pool_id = p_pool_id AND s.shape = p_shape AND NOT (s.device_id = ANY (p_skip))
                   AND lower(s.valid) <= lower(p_during) AND (upper_inf(s.valid) OR upper(s.valid) >= upper(p_during))
                   AND NOT (s.busy && p_during)
                 ORDER BY s.pool_id, s.shape, s.device_index, s.node_rank, s.slices, s.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT s.atom_id, s.node_id, s.device_id, s.node_rank, s.device_index, s.slices, s.slot FROM compute.placeable_atoms AS s
                 WHERE s.pool_id = p_pool_id AND s.shape = p_shape AND NOT (s.device_id = ANY (p_skip))
                   AND lower(s.valid) <= lower(p_during) AND (upper_inf(s.valid) OR upper(s.valid) >= upper(p_during))
                   AND NOT (s.busy && p_during)
                 ORDER BY s.pool_id, s.shape, s.node_rank, s.device_index, s.slices, s.slot
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
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    -- The draw of this call: the order of equal GPUs within a node, and of equally used nodes (spread).
    v_seed bigint := (pg_catalog.random() * 9007199254740991)::bigint;
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
                                           -- equally used: pack fills node by node (pool order); spread
                                           -- draws, so that concurrent placements on a fresh pool stop
                                           -- reaching for the first node (a one-atom request's
                                           -- candidates are one GPU per node: GPU index across nodes)
                                           CASE WHEN p_pack THEN n.rank ELSE pg_catalog.hashtextextended(n.node_id::text, v_seed) END,
                                           n.rank) AS node_order
          FROM nodes AS n
    ), picked AS (
        -- Within the node, GPUs that are equal for the request (as many NVLink peers) in an order
        -- drawn for this call, so that concurrent placements on one node stop reaching for the same
        -- first free GPU (each then skips the other's locked GPU and chooses again); within a GPU, its
        -- lowest placement and slot first.
        SELECT c.atom_id, o.node_order, o.free,
               row_number() OVER (ORDER BY o.node_order, c.peer_score DESC,
                                           pg_catalog.hashtextextended(c.device_id::text, v_seed), c.slice0, c.slot) AS k
          FROM c JOIN ordered_nodes AS o USING (node_id)
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM picked WHERE k <= p_count) < p_count THEN NULL
        WHEN p_same_node AND (SELECT max(node_order) FROM picked WHERE k <= p_count) > 1 THEN NULL
        ELSE (SELECT pg_catalog.array_agg(atom_id ORDER BY k) FROM picked WHERE k <= p_count)
    END);
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
            pg_catalog.format('Only %s atoms of shape %s are schedulable for the whole window (%s more are on cordoned, draining or quarantined nodes, absent GPUs, GPUs with a critical condition (ops.nodes), or change layout within it).',
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
-- Lock order: the chosen devices, FOR UPDATE SKIP LOCKED, in device_id order within each choice. A
-- later choice may lock devices ordered before those already held, but never waits for one, so it
-- cannot deadlock with placements (which never wait) nor with the waiting lockers (extend, layout
-- change, node flags: device_id order).
DECLARE
    v_pack       boolean;
    v_limit      bigint;
    v_skip       uuid[] := '{}';   -- devices lost to concurrent placements: locked, or their atoms taken
    v_skipped    integer;          -- how many were skipped when the candidates were scanned
    v_scanned    integer;
    v_candidates compute.placement_candidate[];
    v_chosen     uuid[];
    v_devices    uuid[];
    v_locked     uuid[];
    v_lost       uuid[];
BEGIN
    v_pack := (compute.pool_get(p_pool_id)).placement_policy = 'pack';
    v_limit := greatest(compute.limit('placement_candidates'), p_count * 8);
    LOOP
        -- 1. candidates, past the devices skipped so far.
        -- Spread order (GPU index across nodes) suits single atoms; a multi-atom request needs
        -- candidates node by node to find a node that fits, and spread then takes the least used.
        v_candidates := compute.place_candidates(p_pool_id, p_shape, p_during, NOT v_pack AND p_count = 1, v_skip, v_limit);
        v_scanned := pg_catalog.cardinality(v_candidates);
        v_skipped := pg_catalog.cardinality(v_skip);
        LOOP
            -- 2. choice among the candidates left.
            v_chosen := compute.place_choose(v_candidates, p_count, p_during, v_pack, p_same_node);
            EXIT WHEN v_chosen IS NULL;
            SELECT pg_catalog.array_agg(DISTINCT c.device_id) INTO v_devices
              FROM pg_catalog.unnest(v_candidates) AS c WHERE c.atom_id = ANY (v_chosen);

            -- 3. lock the devices; a device a concurrent placement holds is skipped, never waited for.
            SELECT pg_catalog.array_agg(l.device_id) INTO v_locked
              FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                     ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;

            -- 4. recheck with this statement's fresh snapshot; the devices lost are left out and the
            --    choice is made again from the same candidates (devices locked but not used stay
            --    locked by this transaction, and may be chosen again).
            SELECT pg_catalog.array_agg(DISTINCT a.device_id) INTO v_lost
              FROM compute.atoms AS a
             WHERE a.atom_id = ANY (v_chosen)
               AND (NOT a.device_id = ANY (coalesce(v_locked, '{}'))
                    OR NOT (compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)));
            IF v_lost IS NULL THEN
                RETURN v_chosen;
            END IF;
            v_skip := v_skip || v_lost;
            SELECT coalesce(pg_catalog.array_agg(c), '{}') INTO v_candidates
              FROM pg_catalog.unnest(v_candidates) AS c WHERE NOT c.device_id = ANY (v_lost);
        END LOOP;
        -- The candidates left cannot meet the request. Walk on past the lost devices if any were lost
        -- since the scan and the scan stopped at its limit (else it saw every free atom already).
        -- Each walk skips at least one more device, so this ends within the pool's devices.
        EXIT WHEN pg_catalog.cardinality(v_skip) = v_skipped OR v_scanned < v_limit;
    END LOOP;
    PERFORM compute.raise_error('CAPACITY_CONFLICT',
        pg_catalog.format('cannot place %s x %s in pool %s during %s', p_count, p_shape, p_pool_id, p_during),
        compute.place_shortfall(p_pool_id, p_shape, p_count, p_during, p_same_node));
END
$$;
COMMENT ON FUNCTION compute.place(uuid, text, integer, tstzrange, boolean) IS
    'Choose and lock atoms for a request (see the file header); CAPACITY_CONFLICT with the reason in the HINT.';
