-- Deploy better_compute:atom_busy to pg
-- Free-capacity bookkeeping: compute.atom_busy keeps each atom's busy windows (trimmed of the past) by statement-level triggers on bookings and atoms; placement's candidate scan and choice read it, never bookings
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE TABLE compute.atom_busy (
    atom_id uuid CONSTRAINT atom_busy_pkey PRIMARY KEY CONSTRAINT atom_busy_atom_id_fkey REFERENCES compute.atoms ON DELETE CASCADE,
    node_id uuid NOT NULL,
    busy    tstzmultirange NOT NULL
);
CREATE INDEX atom_busy_node ON compute.atom_busy (node_id);
COMMENT ON TABLE compute.atom_busy IS 'Per atom, the windows from now on in which a held booking covers a slice and share of it (placement reads this, not bookings).';

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

COMMENT ON FUNCTION compute.atom_busy_atoms_added() IS 'Keep compute.atom_busy: a row for each new atom.';

CREATE OR REPLACE FUNCTION compute.atom_busy_bookings_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_atoms uuid[];
BEGIN
    -- The atoms a changed held booking covers (before or after the change). Three statements: a
    -- transition table exists only for the events that have it.
    IF TG_OP = 'INSERT' THEN
        SELECT pg_catalog.array_agg(DISTINCT x.atom_id) INTO v_atoms
          FROM changed_bookings AS c
          JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
         WHERE c.state = 'held';
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
$function$;

COMMENT ON FUNCTION compute.atom_busy_bookings_changed() IS 'Keep compute.atom_busy: recompute the atoms whose held bookings changed.';

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

CREATE OR REPLACE FUNCTION compute.atom_busy_of(p_atom compute.atoms, p_from timestamp with time zone)
 RETURNS tstzmultirange
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The held bookings of the device's atoms that overlap this one, from p_from on (bookings_atom_live).
    RETURN (SELECT coalesce(pg_catalog.range_agg(b.during * tstzrange(p_from, NULL)), '{}')
              FROM compute.atoms AS x
              JOIN compute.bookings AS b ON b.atom_id = x.atom_id
             WHERE x.device_id = p_atom.device_id AND x.slices && p_atom.slices AND x.shares && p_atom.shares
               AND b.state = 'held' AND upper(b.during) > p_from);
END
$function$;

COMMENT ON FUNCTION compute.atom_busy_of(compute.atoms,timestamp with time zone) IS 'An atom''s busy windows from p_from on, computed from bookings (what compute.atom_busy holds).';

CREATE OR REPLACE FUNCTION compute.atom_busy_refresh(p_atoms uuid[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.atom_busy_refresh(uuid[]) IS 'Recompute the busy windows of these atoms (locked in atom_id order).';

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

-- By hand: the triggers first (they lock bookings and atoms against writes until commit), then
-- every atom's summary from the bookings as they are.
CREATE TRIGGER bookings_atom_busy_insert AFTER INSERT ON compute.bookings
    REFERENCING NEW TABLE AS changed_bookings FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();
CREATE TRIGGER bookings_atom_busy_update AFTER UPDATE ON compute.bookings
    REFERENCING OLD TABLE AS previous_bookings NEW TABLE AS changed_bookings
    FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();
CREATE TRIGGER bookings_atom_busy_delete AFTER DELETE ON compute.bookings
    REFERENCING OLD TABLE AS previous_bookings FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_bookings_changed();
CREATE TRIGGER atoms_atom_busy AFTER INSERT ON compute.atoms
    REFERENCING NEW TABLE AS added_atoms FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_atoms_added();
INSERT INTO compute.atom_busy (atom_id, node_id, busy)
SELECT a.atom_id, a.node_id, compute.atom_busy_of(a, compute.compute_now()) FROM compute.atoms AS a;

COMMIT;
