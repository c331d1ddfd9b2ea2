-- Revert better_compute:gpu_conditions_and_mig_layouts from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP VIEW ops.nodes;

CREATE VIEW ops.nodes AS
    SELECT n.node_id, n.name, s.name AS site, p.name AS pool, p.gpu_model,
           (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id AND d.present) AS gpus,
           (SELECT pg_catalog.array_agg(f.flag ORDER BY f.flag) FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flags,
           CASE WHEN NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id AND f.flag = 'draining') THEN NULL
                WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                              WHERE b.node_id = n.node_id AND b.state IN ('provisional', 'active')
                                AND b.during @> ops.now()) THEN 'draining'
                ELSE 'drained' END AS drain,
           (SELECT pg_catalog.jsonb_object_agg(f.flag, pg_catalog.jsonb_build_object('by', f.set_by, 'reason', f.reason, 'at', f.set_at,
                                                                                    'completed_at', f.completed_at))
              FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flag_details,
           n.inventory_at, n.created_at,
           coalesce(ns.closed_at IS NULL
                    AND ns.last_heard_at > ops.now() - (SELECT l.value FROM compute.limits AS l WHERE l.name = 'session_timeout_seconds')
                                                       * interval '1 second', false) AS connected,
           round(extract(epoch FROM ops.now() - ns.last_heard_at)::numeric, 1) AS last_heard_seconds
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id
      LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.device_conditions_reported(uuid,bigint,jsonb);

DROP FUNCTION compute.device_layout_at(uuid,timestamp with time zone);

CREATE OR REPLACE FUNCTION compute.atom_is_schedulable(p_atom compute.atoms, p_during tstzrange)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN p_atom.valid @> p_during
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_atom.node_id)
       AND EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.device_id = p_atom.device_id AND d.present);
END
$function$;

COMMENT ON FUNCTION compute.atom_is_schedulable(compute.atoms,tstzrange) IS 'Valid for the whole window, on a present GPU of a node without flags.';

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now; a
    -- MIG atom with the UUID of the MIG device it is, which the daemon checks against its own
    -- inventory with the profile and placement (a null cdi_name: not exposed, a condition).
    RETURN (SELECT pg_catalog.jsonb_build_object('node_id', p_node_id, 'devices', coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until)
                       ORDER BY x.index, x.placement, x.slot), '[]'))
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until,
                           CASE WHEN a.kind = 'mig' THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END
                               AS mig_uuid
                      FROM compute.bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> compute.compute_now()
                    OFFSET 0) AS x);  -- OFFSET 0: the subquery stays one, so mig_uuid is computed once per row
END
$function$;

COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation.';

CREATE OR REPLACE FUNCTION compute.node_spec_observed(p_node_id uuid, p_generation bigint, p_conditions jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_conditions IS NULL OR pg_catalog.jsonb_typeof(p_conditions) <> 'array'
       OR pg_catalog.octet_length(p_conditions::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'conditions are a bounded JSON array', 'Send [] when all is well.');
    END IF;
    -- Observed only ever moves forward, and never past what was signed for the node.
    UPDATE compute.node_specs
       SET observed_generation = greatest(observed_generation, p_generation), observed_at = compute.compute_now(), conditions = p_conditions
     WHERE node_id = p_node_id AND p_generation <= signed_generation;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('generation %s was never sent to node %s', p_generation, p_node_id),
            'Report the generation of the spec you applied.');
    END IF;
END
$function$;

COMMENT ON FUNCTION compute.node_spec_observed(uuid,bigint,jsonb) IS 'A node applied a spec generation (verified report); its conditions.';

CREATE OR REPLACE FUNCTION compute.node_spec_refresh(p_node_id uuid)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
-- Lock order: the node's spec row first, then the document is computed by a later statement,
-- whose snapshot (READ COMMITTED) sees every change committed before the lock was granted: two
-- concurrent refreshes cannot store a document that misses the other's change.
DECLARE
    v_spec       compute.node_specs;
    v_document   jsonb;
    v_generation bigint;
BEGIN
    INSERT INTO compute.node_specs (node_id, generation, spec, changed_at)
    VALUES (p_node_id, 1, pg_catalog.jsonb_build_object('node_id', p_node_id, 'devices', '[]'::jsonb), compute.compute_now())
    ON CONFLICT (node_id) DO NOTHING;
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = p_node_id FOR UPDATE;
    v_document := compute.node_spec_document(p_node_id);
    v_generation := v_spec.generation;
    IF v_document IS DISTINCT FROM v_spec.spec THEN
        UPDATE compute.node_specs SET generation = generation + 1, spec = v_document, changed_at = compute.compute_now()
         WHERE node_id = p_node_id RETURNING generation INTO v_generation;
    END IF;
    IF v_spec.signed_generation IS DISTINCT FROM v_generation THEN
        PERFORM compute.work_poke('node.spec.sign', p_node_id::text);
    END IF;
    RETURN v_generation;
END
$function$;

CREATE OR REPLACE FUNCTION compute.node_specs_tick()
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_changed integer := 0;
    v_node_id uuid;
BEGIN
    -- Time passing changes specs without a row changing: bookings that started or ended within
    -- the last node_spec_tick_window_seconds (the tick runs far more often than that).
    FOR v_node_id IN
        SELECT DISTINCT b.node_id FROM compute.bookings AS b
         WHERE b.state = 'active'
           AND (lower(b.during) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]')
             OR upper(b.during) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]'))
         ORDER BY b.node_id LIMIT compute.limit('sweep_batch')
    LOOP
        IF compute.node_spec_refresh(v_node_id)
           IS DISTINCT FROM (SELECT s.generation FROM compute.node_specs AS s WHERE s.node_id = v_node_id) THEN
            v_changed := v_changed + 1;
        END IF;
    END LOOP;
    RETURN v_changed;
END
$function$;

COMMENT ON FUNCTION compute.node_specs_tick() IS 'Sweep: refresh the specs of nodes whose bookings started or ended by time passing.';

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
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state IN ('provisional', 'active')
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
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state IN ('provisional', 'active')
                                   OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

CREATE OR REPLACE FUNCTION compute.place_shortfall(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_document(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    RETURN (SELECT pg_catalog.jsonb_build_object(
        'reservation_id', r.reservation_id, 'tenant_id', r.tenant_id, 'project_id', r.project_id,
        'pool_id', r.pool_id, 'shape', r.shape, 'count', r.count, 'state', r.state,
        'phase', CASE WHEN r.state NOT IN ('provisional', 'active') THEN 'ended'
                      WHEN upper(r.during) <= v_now THEN 'ended'
                      WHEN lower(r.during) > v_now THEN 'upcoming' ELSE 'running' END,
        'start', lower(r.during), 'end', upper(r.during), 'same_node', r.same_node,
        'expires_at', r.expires_at, 'hold_until', r.hold_until, 'created_at', r.created_at,
        'ended_at', r.ended_at, 'end_reason', r.end_reason,
        'bookings', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'atom_id', a.atom_id, 'node', n.name, 'device_uuid', d.uuid, 'kind', a.kind,
                       'profile', a.profile, 'placement', a.placement, 'slot', a.slot,
                       'cdi_name', compute.atom_cdi_name(a.atom_id), 'state', b.state)
                   ORDER BY n.name, d.index, a.placement, a.slot)
              FROM compute.bookings AS b
              JOIN compute.atoms AS a ON a.atom_id = b.atom_id
              JOIN compute.devices AS d ON d.device_id = b.device_id
              JOIN compute.nodes AS n ON n.node_id = b.node_id
             WHERE b.reservation_id = r.reservation_id), '[]'))
      FROM compute.reservations AS r
     WHERE r.reservation_id = p_reservation_id);
END
$function$;

COMMENT ON FUNCTION compute.reservation_document(uuid) IS 'A reservation and its bookings as the API answers (DESIGN §17).';

CREATE OR REPLACE VIEW ops.nodes AS
 SELECT n.node_id,
    n.name,
    s.name AS site,
    p.name AS pool,
    p.gpu_model,
    ( SELECT count(*) AS count
           FROM compute.devices d
          WHERE d.node_id = n.node_id AND d.present) AS gpus,
    ( SELECT array_agg(f.flag ORDER BY f.flag) AS array_agg
           FROM compute.node_flags f
          WHERE f.node_id = n.node_id) AS flags,
        CASE
            WHEN NOT (EXISTS ( SELECT 1
               FROM compute.node_flags f
              WHERE f.node_id = n.node_id AND f.flag = 'draining'::text)) THEN NULL::text
            WHEN (EXISTS ( SELECT 1
               FROM compute.bookings b
              WHERE b.node_id = n.node_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND b.during @> ops.now())) THEN 'draining'::text
            ELSE 'drained'::text
        END AS drain,
    ( SELECT jsonb_object_agg(f.flag, jsonb_build_object('by', f.set_by, 'reason', f.reason, 'at', f.set_at, 'completed_at', f.completed_at)) AS jsonb_object_agg
           FROM compute.node_flags f
          WHERE f.node_id = n.node_id) AS flag_details,
    n.inventory_at,
    n.created_at,
    COALESCE(ns.closed_at IS NULL AND ns.last_heard_at > (ops.now() - (( SELECT l.value
           FROM compute.limits l
          WHERE l.name = 'session_timeout_seconds'::text))::double precision * '00:00:01'::interval), false) AS connected,
    round(EXTRACT(epoch FROM ops.now() - ns.last_heard_at), 1) AS last_heard_seconds
   FROM compute.nodes n
     JOIN compute.pools p ON p.pool_id = n.pool_id
     JOIN compute.sites s ON s.site_id = n.site_id
     LEFT JOIN compute.node_sessions ns ON ns.node_id = n.node_id;

COMMENT ON TABLE compute.device_conditions IS NULL;

COMMENT ON VIEW ops.nodes IS 'Every node: pool, GPUs present, flags (who, why, when), drain state (draining until no booking is live now), connected and the age since last heard.';

DROP TABLE compute.device_conditions;

DROP FUNCTION compute.device_condition_critical(text,boolean);

COMMIT;
