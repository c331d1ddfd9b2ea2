-- Deploy better_compute:candidate_scan_walks_atom_busy to pg
-- The candidate scan walks compute.atom_busy's own pack and spread order indexes and reads each atom's busy windows on the row it walks (no probe per atom): atom_busy carries copies of the atom's pool, shape, node rank, GPU index, device, slices, slot and validity, kept by the atoms triggers
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

-- By hand: each atom's place in the pool's orders and its validity, copied into its summary row
-- (filled from compute.atoms), and the indexes the candidate scan walks.
ALTER TABLE compute.atom_busy ADD COLUMN pool_id uuid, ADD COLUMN shape text, ADD COLUMN node_rank bigint,
    ADD COLUMN device_index integer, ADD COLUMN device_id uuid, ADD COLUMN slices int4range, ADD COLUMN slot integer,
    ADD COLUMN valid tstzrange;
UPDATE compute.atom_busy AS s
   SET pool_id = a.pool_id, shape = a.shape, node_rank = a.node_rank, device_index = a.device_index,
       device_id = a.device_id, slices = a.slices, slot = a.slot, valid = a.valid
  FROM compute.atoms AS a
 WHERE a.atom_id = s.atom_id;
ALTER TABLE compute.atom_busy ALTER COLUMN pool_id SET NOT NULL, ALTER COLUMN shape SET NOT NULL,
    ALTER COLUMN node_rank SET NOT NULL, ALTER COLUMN device_index SET NOT NULL, ALTER COLUMN device_id SET NOT NULL,
    ALTER COLUMN slices SET NOT NULL, ALTER COLUMN valid SET NOT NULL;
CREATE INDEX atom_busy_pack_order ON compute.atom_busy (pool_id, shape, node_rank, device_index, slices, slot);
CREATE INDEX atom_busy_spread_order ON compute.atom_busy (pool_id, shape, device_index, node_rank, slices, slot);
CREATE STATISTICS compute.atom_busy_validity ON lower(valid), upper(valid), upper_inf(valid) FROM compute.atom_busy;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.atom_busy_atoms_added()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- A new atom (a node's inventory, a layout change) starts with the busy windows its device's
    -- held bookings give it, and its place in the pool's orders.
    INSERT INTO compute.atom_busy (atom_id, node_id, busy, pool_id, shape, node_rank, device_index, device_id, slices, slot, valid)
    SELECT a.atom_id, a.node_id, compute.atom_busy_of(a, compute.compute_now()),
           a.pool_id, a.shape, a.node_rank, a.device_index, a.device_id, a.slices, a.slot, a.valid
      FROM added_atoms AS a;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION compute.atom_busy_atoms_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.atom_busy_atoms_changed() IS 'Keep compute.atom_busy: an atom''s validity copied when it changes.';

CREATE OR REPLACE FUNCTION compute.atom_busy_mismatches()
 RETURNS TABLE(atom_id uuid, kept tstzmultirange, computed tstzmultirange)
 LANGUAGE sql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.atom_busy_mismatches() IS 'Atoms whose compute.atom_busy row is missing or differs from their bookings or from the atom (never any).';

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

CREATE TRIGGER atoms_atom_busy_update AFTER UPDATE ON compute.atoms
    REFERENCING NEW TABLE AS changed_atoms FOR EACH STATEMENT EXECUTE FUNCTION compute.atom_busy_atoms_changed();
-- The new statistics at once, so that the candidate scan walks the new indexes from the first placement.
ANALYZE compute.atom_busy;

COMMIT;
