-- Deploy better_compute:gpu_conditions_and_mig_layouts to pg
-- Issue 13 parts 1 and 3: per-GPU conditions reported by nodes (compute.device_conditions), a
-- critical one keeps the GPU out of new placements; the node spec carries each GPU's layout valid now
-- (MIG mode and instances) and since when; the tick refreshes specs when a scheduled layout takes effect.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.device_condition_critical(p_type text, p_status boolean)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- Critical: the GPU cannot serve a new holder as the database describes it. MigConverged false:
    -- its MIG layout is not (yet) the one valid now. Slowdowns and other types only inform.
    SELECT CASE WHEN p_type = 'MigConverged' THEN NOT p_status
                ELSE p_status AND p_type IN ('MigFailed', 'MigPendingReset', 'FallenOffBus', 'XidCritical',
                                             'EccUncorrectable', 'RowRemapPending', 'RowRemapFailed') END
$function$;

COMMENT ON FUNCTION compute.device_condition_critical(text,boolean) IS 'Whether a GPU condition keeps the GPU out of new placements (MigConverged false, or a fault that is true).';

CREATE TABLE compute.device_conditions (
    device_id   uuid NOT NULL,
    type        text NOT NULL,
    status      boolean NOT NULL,
    reason      text NOT NULL,
    message     text NOT NULL DEFAULT '',
    critical    boolean NOT NULL GENERATED ALWAYS AS (compute.device_condition_critical(type, status)) STORED,
    generation  bigint NOT NULL,
    set_by      text NOT NULL,
    since       timestamptz NOT NULL,
    reported_at timestamptz NOT NULL,
    CONSTRAINT device_conditions_pkey PRIMARY KEY (device_id, type),
    CONSTRAINT device_conditions_device_fkey FOREIGN KEY (device_id) REFERENCES compute.devices ON DELETE CASCADE,
    CONSTRAINT device_conditions_type_check CHECK (type ~ '^[A-Z][A-Za-z0-9]{0,63}$'),
    CONSTRAINT device_conditions_reason_check CHECK (reason ~ '^[A-Za-z][A-Za-z0-9]{0,127}$'),
    CONSTRAINT device_conditions_message_check CHECK (length(message) <= 1000),
    CONSTRAINT device_conditions_set_by_check CHECK (length(set_by) BETWEEN 1 AND 300)
);

CREATE INDEX device_conditions_critical ON compute.device_conditions (device_id) WHERE critical;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.atom_is_schedulable(p_atom compute.atoms, p_during tstzrange)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN p_atom.valid @> p_during
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_atom.node_id)
       AND EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.device_id = p_atom.device_id AND d.present)
       AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = p_atom.device_id AND k.critical);
END
$function$;

COMMENT ON FUNCTION compute.atom_is_schedulable(compute.atoms,tstzrange) IS 'Valid for the whole window, on a present GPU without a critical condition, of a node without flags.';

CREATE OR REPLACE FUNCTION compute.device_conditions_reported(p_node_id uuid, p_generation bigint, p_conditions jsonb)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- Lock order: the node's condition rows (through the upsert and delete), after node_specs (the caller's).
DECLARE
    v_now  timestamptz := compute.compute_now();
    v_by   text := 'node ' || (SELECT n.name FROM compute.nodes AS n WHERE n.node_id = p_node_id);
    v_bad  jsonb;
    v_rows integer;
BEGIN
    -- The per-GPU entries of a node.observed report: {gpu_uuid, type, status, reason, message}.
    SELECT c INTO v_bad FROM pg_catalog.jsonb_array_elements(p_conditions) AS c
     WHERE c ? 'gpu_uuid'
       AND (pg_catalog.jsonb_typeof(c -> 'gpu_uuid') IS DISTINCT FROM 'string'
            OR pg_catalog.jsonb_typeof(c -> 'type') IS DISTINCT FROM 'string' OR (c ->> 'type') !~ '^[A-Z][A-Za-z0-9]{0,63}$'
            OR pg_catalog.jsonb_typeof(c -> 'status') IS DISTINCT FROM 'boolean'
            OR pg_catalog.jsonb_typeof(c -> 'reason') IS DISTINCT FROM 'string' OR (c ->> 'reason') !~ '^[A-Za-z][A-Za-z0-9]{0,127}$'
            OR pg_catalog.jsonb_typeof(coalesce(c -> 'message', '""')) IS DISTINCT FROM 'string'
            OR NOT EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.node_id = p_node_id AND d.uuid = c ->> 'gpu_uuid'))
     LIMIT 1;
    IF v_bad IS NOT NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('invalid GPU condition %s', pg_catalog.left(v_bad::text, 300)),
            'A GPU condition is {gpu_uuid (a GPU of this node), type (CamelCase), status (boolean), reason (CamelCase), message}.');
    END IF;
    IF (SELECT count(*) FROM pg_catalog.jsonb_array_elements(p_conditions) AS c WHERE c ? 'gpu_uuid')
       > (SELECT count(DISTINCT (c ->> 'gpu_uuid', c ->> 'type')) FROM pg_catalog.jsonb_array_elements(p_conditions) AS c WHERE c ? 'gpu_uuid') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a GPU condition type is reported twice for one GPU',
            'Report each type at most once per GPU.');
    END IF;

    -- The report is the node's whole set: what it no longer reports is gone (unless newer than it).
    DELETE FROM compute.device_conditions AS x
     USING compute.devices AS d
     WHERE d.device_id = x.device_id AND d.node_id = p_node_id AND x.generation <= p_generation
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(p_conditions) AS c
                        WHERE c ->> 'gpu_uuid' = d.uuid AND c ->> 'type' = x.type);
    INSERT INTO compute.device_conditions AS x (device_id, type, status, reason, message, generation, set_by, since, reported_at)
    SELECT d.device_id, c ->> 'type', (c ->> 'status')::boolean, c ->> 'reason', pg_catalog.left(coalesce(c ->> 'message', ''), 1000),
           p_generation, v_by, v_now, v_now
      FROM pg_catalog.jsonb_array_elements(p_conditions) AS c
      JOIN compute.devices AS d ON d.node_id = p_node_id AND d.uuid = c ->> 'gpu_uuid'
     ORDER BY d.device_id, c ->> 'type'
    ON CONFLICT ON CONSTRAINT device_conditions_pkey DO UPDATE
        SET status = EXCLUDED.status, reason = EXCLUDED.reason, message = EXCLUDED.message, generation = EXCLUDED.generation,
            set_by = EXCLUDED.set_by, reported_at = EXCLUDED.reported_at,
            since = CASE WHEN x.status = EXCLUDED.status THEN x.since ELSE EXCLUDED.since END
        WHERE x.generation <= EXCLUDED.generation;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$function$;

COMMENT ON FUNCTION compute.device_conditions_reported(uuid,bigint,jsonb) IS 'Store the per-GPU conditions of a verified node.observed report (its whole set; older generations never overwrite newer).';

CREATE OR REPLACE FUNCTION compute.device_layout_at(p_device_id uuid, p_at timestamp with time zone)
 RETURNS TABLE(layout text, since timestamp with time zone)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The layout a GPU has at p_at, read from its atoms valid then (devices.layout is the newest
    -- one scheduled, perhaps for later), and since when: the last change at or before p_at.
    RETURN QUERY
    SELECT CASE WHEN bool_or(a.kind = 'mig')
                THEN 'mig:' || pg_catalog.string_agg(a.profile || '@' || a.placement, ',' ORDER BY a.placement)
                WHEN bool_or(a.kind = 'slot') THEN 'timeslice:' || max(a.slot_count)
                ELSE 'whole' END,
           greatest(max(lower(a.valid)),
                    (SELECT max(upper(o.valid)) FROM compute.atoms AS o WHERE o.device_id = p_device_id AND upper(o.valid) <= p_at))
      FROM compute.atoms AS a
     WHERE a.device_id = p_device_id AND a.valid @> p_at
    HAVING count(*) > 0;
END
$function$;

COMMENT ON FUNCTION compute.device_layout_at(uuid,timestamp with time zone) IS 'The layout of a GPU at a time (from its atoms) and since when it holds.';

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now; a
    -- MIG atom with the UUID of the MIG device it is, which the daemon checks against its own
    -- inventory with the profile and placement (a null cdi_name: not exposed, a condition).
    -- And per present GPU, the layout valid now and since when; for a MIG-capable GPU the MIG mode
    -- and GPU instances (profile@placement) it must have, which the daemon converges (issue 13).
    RETURN pg_catalog.jsonb_build_object('node_id', p_node_id,
        'devices', (SELECT coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until)
                       ORDER BY x.index, x.placement, x.slot), '[]')
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until,
                           CASE WHEN a.kind = 'mig' THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END
                               AS mig_uuid
                      FROM compute.bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> v_now
                    OFFSET 0) AS x),  -- OFFSET 0: the subquery stays one, so mig_uuid is computed once per row
        'gpus', (SELECT coalesce(pg_catalog.jsonb_agg(
                    pg_catalog.jsonb_build_object('uuid', d.uuid, 'index', d.index, 'layout', l.layout, 'since', l.since,
                        'mig', CASE WHEN d.mig_supported THEN pg_catalog.jsonb_build_object(
                                   'mode', CASE WHEN l.layout LIKE 'mig:%' THEN 'enabled' ELSE 'disabled' END,
                                   'instances', CASE WHEN l.layout LIKE 'mig:%' THEN
                                       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                   'profile', pg_catalog.split_part(i, '@', 1),
                                                   'placement', pg_catalog.split_part(i, '@', 2)::integer))
                                          FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.substr(l.layout, 5), ',')) AS i)
                                       ELSE '[]'::jsonb END) END)
                    ORDER BY d.index), '[]')
              FROM compute.devices AS d
              CROSS JOIN LATERAL compute.device_layout_at(d.device_id, v_now) AS l
             WHERE d.node_id = p_node_id AND d.present));
END
$function$;

COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation, and each GPU''s layout (MIG mode and instances).';

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
    -- Entries with a gpu_uuid are that GPU's conditions (compute.device_conditions).
    PERFORM compute.device_conditions_reported(p_node_id, p_generation, p_conditions);
END
$function$;

COMMENT ON FUNCTION compute.node_spec_observed(uuid,bigint,jsonb) IS 'A node applied a spec generation (verified report); its conditions, those of its GPUs per GPU.';

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
        -- A GPU whose MIG layout changes is not converged until its node says so for this generation
        -- or a later one (placement leaves it out meanwhile): only on a node whose daemon
        -- acknowledges specs, and for a GPU the previous spec already listed.
        IF v_spec.observed_generation IS NOT NULL THEN
            INSERT INTO compute.device_conditions AS x (device_id, type, status, reason, message, generation, set_by, since, reported_at)
            SELECT d.device_id, 'MigConverged', false, 'LayoutChanged',
                   pg_catalog.format('layout %s holds from %s: waiting for the node to converge', g ->> 'layout', g ->> 'since'),
                   v_generation, 'control-plane', compute.compute_now(), compute.compute_now()
              FROM pg_catalog.jsonb_array_elements(v_document -> 'gpus') AS g
              JOIN pg_catalog.jsonb_array_elements(coalesce(v_spec.spec -> 'gpus', '[]')) AS o ON o ->> 'uuid' = g ->> 'uuid'
              JOIN compute.devices AS d ON d.uuid = g ->> 'uuid'
             WHERE g -> 'mig' IS DISTINCT FROM o -> 'mig' AND pg_catalog.jsonb_typeof(g -> 'mig') = 'object'
             ORDER BY d.device_id
            ON CONFLICT ON CONSTRAINT device_conditions_pkey DO UPDATE
                SET status = false, reason = EXCLUDED.reason, message = EXCLUDED.message, generation = EXCLUDED.generation,
                    set_by = EXCLUDED.set_by, reported_at = EXCLUDED.reported_at,
                    since = CASE WHEN x.status THEN EXCLUDED.since ELSE x.since END;
        END IF;
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
    -- And GPUs whose scheduled layout change took effect (atoms that started or ended).
    FOR v_node_id IN
        SELECT x.node_id FROM (
            SELECT b.node_id FROM compute.bookings AS b
             WHERE b.state = 'active'
               AND (lower(b.during) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]')
                 OR upper(b.during) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]'))
            UNION
            SELECT a.node_id FROM compute.atoms AS a
             WHERE lower(a.valid) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]')
                OR upper(a.valid) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]')) AS x
         ORDER BY x.node_id LIMIT compute.limit('sweep_batch')
    LOOP
        IF compute.node_spec_refresh(v_node_id)
           IS DISTINCT FROM (SELECT s.generation FROM compute.node_specs AS s WHERE s.node_id = v_node_id) THEN
            v_changed := v_changed + 1;
        END IF;
    END LOOP;
    RETURN v_changed;
END
$function$;

COMMENT ON FUNCTION compute.node_specs_tick() IS 'Sweep: refresh the specs of nodes whose bookings started or ended, or whose GPUs changed layout, by time passing.';

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
                   AND NOT EXISTS (SELECT 1 FROM compute.device_conditions AS k WHERE k.device_id = a.device_id AND k.critical)
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
                       'cdi_name', compute.atom_cdi_name(a.atom_id), 'state', b.state,
                       'conditions', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                 'type', c.type, 'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                 'message', c.message, 'since', c.since) ORDER BY c.type), '[]')
                                        FROM compute.device_conditions AS c WHERE c.device_id = d.device_id))
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

COMMENT ON FUNCTION compute.reservation_document(uuid) IS 'A reservation and its bookings as the API answers (docs/architecture.md §17).';

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
    round(EXTRACT(epoch FROM ops.now() - ns.last_heard_at), 1) AS last_heard_seconds,
    ( SELECT jsonb_agg(jsonb_build_object('gpu_uuid', d.uuid, 'index', d.index, 'type', c.type, 'status', c.status, 'critical', c.critical, 'reason', c.reason, 'message', c.message, 'by', c.set_by, 'since', c.since, 'reported_at', c.reported_at, 'generation', c.generation) ORDER BY d.index, c.type) AS jsonb_agg
           FROM compute.device_conditions c
             JOIN compute.devices d ON d.device_id = c.device_id
          WHERE d.node_id = n.node_id) AS gpu_conditions,
    ( SELECT count(DISTINCT c.device_id) AS count
           FROM compute.device_conditions c
             JOIN compute.devices d ON d.device_id = c.device_id
          WHERE d.node_id = n.node_id AND c.critical) AS gpus_unschedulable
   FROM compute.nodes n
     JOIN compute.pools p ON p.pool_id = n.pool_id
     JOIN compute.sites s ON s.site_id = n.site_id
     LEFT JOIN compute.node_sessions ns ON ns.node_id = n.node_id;

COMMENT ON TABLE compute.device_conditions IS 'Conditions of each GPU (MIG convergence, health) as its node last reported them; a critical one keeps the GPU out of new placements.';

COMMENT ON VIEW ops.nodes IS 'Every node: pool, GPUs present, flags (who, why, when), drain state (draining until no booking is live now), connected and the age since last heard, its GPUs'' conditions (who, why, since when) and how many GPUs a critical one keeps out of placement.';

COMMENT ON TABLE compute.device_conditions IS
    'Conditions of each GPU (MIG convergence, health) as its node last reported them; a critical one keeps the GPU out of new placements.';

CREATE OR REPLACE VIEW ops.nodes AS
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
           round(extract(epoch FROM ops.now() - ns.last_heard_at)::numeric, 1) AS last_heard_seconds,
           (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('gpu_uuid', d.uuid, 'index', d.index, 'type', c.type,
                                                                      'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                                      'message', c.message, 'by', c.set_by, 'since', c.since,
                                                                      'reported_at', c.reported_at, 'generation', c.generation)
                                        ORDER BY d.index, c.type)
              FROM compute.device_conditions AS c JOIN compute.devices AS d ON d.device_id = c.device_id
             WHERE d.node_id = n.node_id) AS gpu_conditions,
           (SELECT count(DISTINCT c.device_id) FROM compute.device_conditions AS c JOIN compute.devices AS d ON d.device_id = c.device_id
             WHERE d.node_id = n.node_id AND c.critical) AS gpus_unschedulable
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id
      LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id;

COMMIT;
