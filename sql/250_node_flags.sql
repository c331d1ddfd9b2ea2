-- Node flags: cordoned, draining, quarantined. Any flag keeps a node out of placement. Draining
-- also waits for the node's current bookings to end: the drain is complete as soon as none is live
-- at compute_now() (ops.nodes derives it, so it completes by itself as time passes), and
-- compute.node_drains_complete() records when (the worker calls it; release and expiry too).
-- Future bookings on a drained node stay: an operator releases or keeps them.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.node_flag_set(p_node_id uuid, p_flag text, p_by text, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the node's devices FOR UPDATE (waits for placements in flight on them), so every
-- placement that commits after this flag sees it.
BEGIN
    PERFORM compute.node_get(p_node_id);
    IF p_flag IS NULL OR p_flag NOT IN ('cordoned', 'draining', 'quarantined') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown node flag %L', p_flag), 'Use cordoned, draining or quarantined.');
    END IF;
    IF p_reason IS NULL OR length(p_reason) NOT BETWEEN 1 AND 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a flag needs a reason', 'Say why, in at most 1000 characters.');
    END IF;
    PERFORM 1 FROM compute.devices AS d WHERE d.node_id = p_node_id ORDER BY d.device_id FOR UPDATE;
    INSERT INTO compute.node_flags (node_id, flag, set_by, reason, set_at)
    VALUES (p_node_id, p_flag, coalesce(p_by, 'unknown'), p_reason, compute.compute_now())
    ON CONFLICT (node_id, flag) DO UPDATE SET set_by = EXCLUDED.set_by, reason = EXCLUDED.reason;
    IF p_flag = 'draining' THEN
        PERFORM compute.node_drains_complete();
    END IF;
END
$$;
COMMENT ON FUNCTION compute.node_flag_set(uuid, text, text, text) IS 'Set a node flag (who and why recorded); the node gets no new placements.';

CREATE FUNCTION compute.node_flag_clear(p_node_id uuid, p_flag text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.node_get(p_node_id);
    DELETE FROM compute.node_flags WHERE node_id = p_node_id AND flag = p_flag;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION compute.node_flag_clear(uuid, text) IS 'Clear a node flag; false when it was not set.';

CREATE FUNCTION compute.node_drains_complete()
RETURNS integer
LANGUAGE sql
AS $$
    WITH done AS (
        UPDATE compute.node_flags AS f SET completed_at = compute.compute_now()
         WHERE f.flag = 'draining' AND f.completed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.node_id = f.node_id AND b.state = 'held'
                              AND b.during @> compute.compute_now())
        RETURNING 1)
    SELECT count(*)::integer FROM done
$$;
COMMENT ON FUNCTION compute.node_drains_complete() IS 'Record completed drains (no live booking at compute_now()); returns how many completed.';

-- == Per-GPU conditions (issue 13 parts 1 and 3) =====================================================
-- What a node's daemon reports about each of its GPUs (MIG convergence, health), kept per device and
-- type. A critical condition keeps the GPU (every atom of it) out of new placements, like a flag on the
-- GPU alone, and changes no booking (P6). The node reports the whole set each time (level-triggered):
-- a type it no longer reports is gone. Each row keeps who said it (set_by), why (reason, message),
-- since when its status holds (since) and the spec generation it was reported under: a report of an
-- older generation never overwrites what a newer one (or the control plane, at a layout change) said.

CREATE FUNCTION compute.device_condition_critical(p_type text, p_status boolean)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    -- Critical: the GPU cannot serve a new holder as the database describes it. MigConverged false:
    -- its MIG layout is not (yet) the one valid now. Slowdowns and other types only inform.
    SELECT CASE WHEN p_type = 'MigConverged' THEN NOT p_status
                ELSE p_status AND p_type IN ('MigFailed', 'MigPendingReset', 'FallenOffBus', 'XidCritical',
                                             'EccUncorrectable', 'RowRemapPending', 'RowRemapFailed') END
$$;
COMMENT ON FUNCTION compute.device_condition_critical(text, boolean) IS
    'Whether a GPU condition keeps the GPU out of new placements (MigConverged false, or a fault that is true).';

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
COMMENT ON TABLE compute.device_conditions IS
    'Conditions of each GPU (MIG convergence, health) as its node last reported them; a critical one keeps the GPU out of new placements.';

CREATE FUNCTION compute.device_conditions_reported(p_node_id uuid, p_generation bigint, p_conditions jsonb)
RETURNS integer
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.device_conditions_reported(uuid, bigint, jsonb) IS
    'Store the per-GPU conditions of a verified node.observed report (its whole set; older generations never overwrite newer).';

CREATE FUNCTION compute.device_layout_at(p_device_id uuid, p_at timestamptz)
RETURNS TABLE (layout text, since timestamptz)
LANGUAGE plpgsql STABLE
AS $$
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
$$;
COMMENT ON FUNCTION compute.device_layout_at(uuid, timestamptz) IS 'The layout of a GPU at a time (from its atoms) and since when it holds.';
