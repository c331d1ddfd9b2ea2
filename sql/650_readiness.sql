-- Ready means usable, released means withdrawn (issue 13, parts 5 and 6). Never tell a tenant they
-- hold something the node has not exposed.
--
-- node_spec_refresh records, per booking, the spec generation that granted it to the node and the
-- one that withdrew it (compute.node_grants). The node's acknowledgement (node.observed, applied by
-- compute.node_observed) says per booking of the spec it applied whether it exposed the device
-- ('exposed'), has it but waits for the control plane to name it ('pending': a MIG instance the
-- inventory has not reported yet) or cannot ('failed', with the node's reason), and which GPUs a
-- process still uses that no booking grants any more (the node stops them after the spec's
-- withdrawal grace period; those it could not stop are 'in_use').
--
-- A booking's device is ready when its reservation is active and running, the node acknowledged a
-- generation that grants it, reported it exposed, and confirmed every earlier holder of the same
-- slices of the GPU withdrawn: a generation at or after the one that removed it, with nothing left
-- using the GPU. A node that stays silent keeps the next holder waiting, with the reason (P6: a
-- partition changes a condition, not ownership); an operator who fenced the node out of band (power
-- cut, processes stopped by hand) says so with ops.node_fence, audited.
SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('withdrawal_grace_seconds', 30, 'seconds',
     'After a booking ends, how long a process still using its GPU or MIG instance may take to stop (SIGTERM) before the node kills it (carried in the spec).');

CREATE TABLE compute.node_grants (
    booking_id                  bigint CONSTRAINT node_grants_pkey PRIMARY KEY CONSTRAINT node_grants_booking_id_fkey REFERENCES compute.bookings ON DELETE CASCADE,
    node_id                     uuid NOT NULL CONSTRAINT node_grants_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    granted_generation          bigint NOT NULL,
    withdrawn_generation        bigint CONSTRAINT node_grants_withdrawn_generation_check CHECK (withdrawn_generation > granted_generation),
    report_generation           bigint,
    exposure                    text CONSTRAINT node_grants_exposure_check CHECK (exposure IN ('exposed', 'pending', 'failed')),
    reason                      text CONSTRAINT node_grants_reason_check CHECK (length(reason) <= 1000),
    withdrawal_acked_generation bigint,
    fenced_by                   text,
    fenced_reason               text CONSTRAINT node_grants_fenced_reason_check CHECK (length(fenced_reason) <= 1000),
    fenced_at                   timestamptz,
    CONSTRAINT node_grants_reported_has_exposure CHECK ((report_generation IS NULL) = (exposure IS NULL)),
    CONSTRAINT node_grants_fenced_has_who CHECK ((fenced_at IS NULL) = (fenced_by IS NULL))
);
CREATE INDEX node_grants_node ON compute.node_grants (node_id);
CREATE INDEX node_grants_withdrawing ON compute.node_grants (node_id)
    WHERE withdrawn_generation IS NOT NULL AND withdrawal_acked_generation IS NULL AND fenced_at IS NULL;
COMMENT ON TABLE compute.node_grants IS 'Per booking a node''s spec granted: the generations that granted and withdrew it, and what the node reported.';

-- -- what the node reported (a verified node.observed report) ----------------------------------------

CREATE FUNCTION compute.node_observed(p_node_id uuid, p_body jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the node's spec row (node_spec_observed), then its grants.
DECLARE
    v_generation bigint := compute.report_bigint(p_body, 'generation');
    v_devices    jsonb := p_body -> 'devices';
    v_withdrawal jsonb := p_body -> 'withdrawal';
    v_in_use     text[];
BEGIN
    PERFORM compute.node_spec_observed(p_node_id, v_generation, p_body -> 'conditions');
    IF v_devices IS NOT NULL AND (pg_catalog.jsonb_typeof(v_devices) <> 'array' OR EXISTS (
           SELECT 1 FROM pg_catalog.jsonb_array_elements(v_devices) AS d
            WHERE pg_catalog.jsonb_typeof(d) <> 'object' OR pg_catalog.jsonb_typeof(d -> 'booking_id') IS DISTINCT FROM 'number'
               OR (d ->> 'booking_id') !~ '^[0-9]{1,18}$' OR (d ->> 'state') IS NULL OR (d ->> 'state') NOT IN ('exposed', 'pending', 'failed')
               OR pg_catalog.jsonb_typeof(coalesce(d -> 'reason', 'null')) NOT IN ('string', 'null'))) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'devices is a list of {booking_id, state: exposed|pending|failed, reason}',
            'Report each booking of the applied spec once, by the booking_id the spec gave.');
    END IF;
    IF v_withdrawal IS NOT NULL AND (pg_catalog.jsonb_typeof(v_withdrawal) <> 'object'
           OR pg_catalog.jsonb_typeof(v_withdrawal -> 'in_use') IS DISTINCT FROM 'array' OR EXISTS (
               SELECT 1 FROM pg_catalog.jsonb_array_elements(v_withdrawal -> 'in_use') AS u
                WHERE pg_catalog.jsonb_typeof(u -> 'gpu_uuid') IS DISTINCT FROM 'string')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'withdrawal is {in_use: [{gpu_uuid, mig_uuid, pids}]}',
            'List the GPUs a process no booking grants still uses ([] when none).');
    END IF;
    -- An acknowledgement older than one applied already says nothing new.
    IF v_generation < (SELECT s.observed_generation FROM compute.node_specs AS s WHERE s.node_id = p_node_id) THEN
        RETURN;
    END IF;
    UPDATE compute.node_grants AS g
       SET report_generation = v_generation, exposure = d ->> 'state', reason = pg_catalog.left(d ->> 'reason', 1000)
      FROM pg_catalog.jsonb_array_elements(coalesce(v_devices, '[]')) AS d
     WHERE g.node_id = p_node_id AND g.booking_id = (d ->> 'booking_id')::bigint AND g.granted_generation <= v_generation;
    -- A withdrawal is done once the node applied the generation that made it and no process it
    -- could not stop is left on the GPU. A report without the withdrawal (a bcd before this
    -- release) confirms none.
    IF v_withdrawal IS NOT NULL THEN
        v_in_use := ARRAY(SELECT u ->> 'gpu_uuid' FROM pg_catalog.jsonb_array_elements(v_withdrawal -> 'in_use') AS u);
        UPDATE compute.node_grants AS g SET withdrawal_acked_generation = v_generation
          FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
         WHERE g.node_id = p_node_id AND g.withdrawn_generation <= v_generation AND g.withdrawal_acked_generation IS NULL
           AND b.booking_id = g.booking_id AND NOT (d.uuid = ANY (v_in_use));
    END IF;
END
$$;
COMMENT ON FUNCTION compute.node_observed(uuid, jsonb) IS 'A node''s verified acknowledgement: the generation applied, its conditions, per booking whether it is exposed, and what it withdrew.';

-- -- readiness -----------------------------------------------------------------------------------------

CREATE FUNCTION compute.booking_readiness(p_booking compute.bookings, p_reservation_state text, p_instance_kind text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
-- Of a booking row and its reservation's state and instance kind, as a caller that read them has
-- them (compute.reservation_document: no second read of either row per booking).
DECLARE
    v_now       timestamptz := compute.compute_now();
    v_state     text := compute.booking_state(p_booking.state, p_reservation_state);
    v_grant     compute.node_grants;
    v_spec      compute.node_specs;
    v_node      text;
    v_heard     text;
    v_previous  text;
    v_failed    text;
    v_kind      text := p_instance_kind;
BEGIN
    IF v_state = 'provisional' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'waiting for the admission''s decision');
    ELSIF v_state <> 'active' OR upper(p_booking.during) <= v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'ended');
    ELSIF lower(p_booking.during) > v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason',
            pg_catalog.format('starts at %s', pg_catalog.to_char(lower(p_booking.during) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
    END IF;
    SELECT n.name, CASE WHEN ns.closed_at IS NULL AND ns.last_heard_at > v_now - compute.limit('session_timeout_seconds') * interval '1 second'
                        THEN 'connected'
                        WHEN ns.last_heard_at IS NULL THEN 'not connected, never heard'
                        ELSE pg_catalog.format('not connected, last heard %s s ago', round(extract(epoch FROM v_now - ns.last_heard_at))) END
      INTO v_node, v_heard
      FROM compute.nodes AS n LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
     WHERE n.node_id = p_booking.node_id;
    -- A VPS booking (sql/700_instances.sql) is no device of the spec (its GPU is passed through to
    -- the instance's VM, never granted): ready once the node reported the instance running at its
    -- newest generation; failed when the instance failed.
    IF v_kind = 'vps' THEN
        RETURN (SELECT CASE WHEN i.state = 'failed' THEN pg_catalog.jsonb_build_object('state', 'failed', 'reason', i.failure)
                            WHEN i.state = 'running' AND i.observed_generation = i.generation
                                THEN pg_catalog.jsonb_build_object('state', 'ready', 'reason', NULL)
                            ELSE pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
                                     pg_catalog.format('node %s (%s) has not reported instance %s running at generation %s (it is %s)',
                                                       v_node, v_heard, i.instance_id, i.generation, i.state)) END
                  FROM compute.instances AS i WHERE i.reservation_id = p_booking.reservation_id);
    END IF;
    SELECT * INTO v_grant FROM compute.node_grants AS g WHERE g.booking_id = p_booking.booking_id;
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = p_booking.node_id;
    IF v_grant.booking_id IS NULL OR v_grant.withdrawn_generation IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('the spec of node %s does not grant the device yet (its tick adds bookings as they start)', v_node));
    END IF;
    -- Earlier holders of the same slices of this GPU whose withdrawal the node has not confirmed.
    SELECT pg_catalog.format('; generation %s withdraws reservation %s from this GPU', g.withdrawn_generation, b.reservation_id)
      INTO v_previous
      FROM compute.node_grants AS g JOIN compute.bookings AS b ON b.booking_id = g.booking_id
     WHERE g.node_id = p_booking.node_id AND g.withdrawn_generation IS NOT NULL AND g.withdrawal_acked_generation IS NULL
       AND g.fenced_at IS NULL AND b.booking_id <> p_booking.booking_id AND b.device_id = p_booking.device_id
       AND b.slices && p_booking.slices AND b.shares && p_booking.shares
     ORDER BY g.withdrawn_generation DESC LIMIT 1;
    -- The node could not apply a generation that grants it: its condition.
    SELECT c ->> 'type' || ': ' || coalesce(c ->> 'message', '') INTO v_failed
      FROM pg_catalog.jsonb_array_elements(v_spec.conditions) AS c
     WHERE c ->> 'type' = 'SpecFailed' AND (c ->> 'generation') ~ '^[0-9]{1,18}$' AND (c ->> 'generation')::bigint >= v_grant.granted_generation
     LIMIT 1;
    IF v_failed IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'failed', 'reason', pg_catalog.left(v_failed, 1000));
    END IF;
    IF coalesce(v_spec.observed_generation, 0) < v_grant.granted_generation THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s (%s) has not acknowledged spec generation %s, which grants this device (acknowledged: %s)%s',
                              v_node, v_heard, v_grant.granted_generation, coalesce(v_spec.observed_generation::text, 'none'),
                              coalesce(v_previous, '')));
    ELSIF v_grant.exposure IS NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s acknowledged generation %s without saying whether it exposed the device (a bcd older than this control plane)',
                              v_node, v_spec.observed_generation));
    ELSIF v_grant.exposure = 'failed' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'failed', 'reason', coalesce(v_grant.reason, 'the node cannot expose the device'));
    ELSIF v_grant.exposure = 'pending' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason', coalesce(v_grant.reason, 'the node is preparing the device'));
    ELSIF v_previous IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s (%s) has not confirmed that the GPU is no longer used: a process it could not stop is still in use there%s',
                              v_node, v_heard, v_previous));
    END IF;
    RETURN pg_catalog.jsonb_build_object('state', 'ready', 'reason', NULL);
END
$$;
COMMENT ON FUNCTION compute.booking_readiness(compute.bookings, text, text) IS
    'Whether a booking''s device is usable, given the booking and its reservation''s state and instance kind: {state, reason}.';

CREATE FUNCTION compute.booking_readiness(p_booking_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT compute.booking_readiness(b, r.state, r.instance_kind)
              FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
             WHERE b.booking_id = p_booking_id);
END
$$;
COMMENT ON FUNCTION compute.booking_readiness(bigint) IS 'Whether a booking''s device is usable: {state: ready|waiting_for_node|failed|not_running, reason}.';

CREATE FUNCTION compute.bookings_readiness(p_bookings jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    -- Of a reservation's bookings (as reservation_document lists them, each with its readiness):
    -- failed when any device failed; ready when all are; else the first reason to wait.
    RETURN (SELECT CASE WHEN count(*) = 0 THEN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'no bookings')
                        WHEN bool_or(x.r ->> 'state' = 'failed') THEN (array_agg(x.r ORDER BY x.n) FILTER (WHERE x.r ->> 'state' = 'failed'))[1]
                        WHEN bool_and(x.r ->> 'state' = 'ready') THEN pg_catalog.jsonb_build_object('state', 'ready', 'reason', NULL)
                        WHEN bool_or(x.r ->> 'state' = 'waiting_for_node')
                            THEN (array_agg(x.r ORDER BY x.n) FILTER (WHERE x.r ->> 'state' = 'waiting_for_node'))[1]
                        ELSE (array_agg(x.r ORDER BY x.n))[1] END
                   || pg_catalog.jsonb_build_object('devices_ready', count(*) FILTER (WHERE x.r ->> 'state' = 'ready'), 'devices', count(*))
              FROM (SELECT b.value -> 'readiness' AS r, b.ordinality AS n
                      FROM pg_catalog.jsonb_array_elements(p_bookings) WITH ORDINALITY AS b) AS x);
END
$$;
COMMENT ON FUNCTION compute.bookings_readiness(jsonb) IS 'A reservation''s readiness from its bookings'': failed if a device failed, ready when all are, else why it waits.';

-- -- ops (bc_operator) --------------------------------------------------------------------------------

CREATE FUNCTION ops.booking_readiness(p_booking_id bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = ''
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.booking_id = p_booking_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no booking %s', p_booking_id),
            'ops.readiness lists the bookings by id, with their reservation and node.');
    END IF;
    RETURN compute.booking_readiness(p_booking_id);
END
$$;
COMMENT ON FUNCTION ops.booking_readiness(bigint) IS 'A booking''s readiness (what ops.readiness shows), for operators.';

CREATE VIEW ops.readiness AS
    SELECT b.booking_id, b.reservation_id, b.tenant_id, n.name AS node, b.node_id, d.uuid AS device_uuid, a.kind, a.profile, a.placement,
           a.slot, x.r ->> 'state' AS state, x.r ->> 'reason' AS reason, g.granted_generation, s.observed_generation
      FROM compute.active_bookings AS b
      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
      JOIN compute.devices AS d ON d.device_id = b.device_id
      JOIN compute.nodes AS n ON n.node_id = b.node_id
      LEFT JOIN compute.node_grants AS g ON g.booking_id = b.booking_id
      LEFT JOIN compute.node_specs AS s ON s.node_id = b.node_id
      CROSS JOIN LATERAL (SELECT ops.booking_readiness(b.booking_id) AS r) AS x
     WHERE b.during @> ops.now();
COMMENT ON VIEW ops.readiness IS 'Every booking holding now: ready, waiting_for_node or failed, and why.';
COMMENT ON COLUMN ops.readiness.booking_id IS 'The booking (one atom of a reservation).';
COMMENT ON COLUMN ops.readiness.reservation_id IS 'Its reservation.';
COMMENT ON COLUMN ops.readiness.tenant_id IS 'The tenant holding it.';
COMMENT ON COLUMN ops.readiness.node IS 'The node''s name.';
COMMENT ON COLUMN ops.readiness.node_id IS 'The node''s id.';
COMMENT ON COLUMN ops.readiness.device_uuid IS 'The GPU''s uuid.';
COMMENT ON COLUMN ops.readiness.kind IS 'gpu, mig or slot.';
COMMENT ON COLUMN ops.readiness.profile IS 'A MIG profile (NULL otherwise).';
COMMENT ON COLUMN ops.readiness.placement IS 'A MIG instance''s start slice.';
COMMENT ON COLUMN ops.readiness.slot IS 'A time-slice slot.';
COMMENT ON COLUMN ops.readiness.state IS 'ready, waiting_for_node or failed.';
COMMENT ON COLUMN ops.readiness.reason IS 'Why it waits or failed.';
COMMENT ON COLUMN ops.readiness.granted_generation IS 'The spec generation that grants the device to the node.';
COMMENT ON COLUMN ops.readiness.observed_generation IS 'The spec generation the node last acknowledged.';

CREATE VIEW ops.withdrawals AS
    SELECT g.node_id, n.name AS node, b.booking_id, b.reservation_id, d.uuid AS device_uuid, g.withdrawn_generation,
           s.observed_generation, g.withdrawal_acked_generation, g.fenced_by, g.fenced_reason, g.fenced_at
      FROM compute.node_grants AS g
      JOIN compute.bookings AS b ON b.booking_id = g.booking_id
      JOIN compute.devices AS d ON d.device_id = b.device_id
      JOIN compute.nodes AS n ON n.node_id = g.node_id
      LEFT JOIN compute.node_specs AS s ON s.node_id = g.node_id
     WHERE g.withdrawn_generation IS NOT NULL AND g.withdrawal_acked_generation IS NULL AND g.fenced_at IS NULL;
COMMENT ON VIEW ops.withdrawals IS 'Ended bookings whose node has not confirmed the device withdrawn (nothing using it): their next holders wait.';
COMMENT ON COLUMN ops.withdrawals.node_id IS 'The node''s id.';
COMMENT ON COLUMN ops.withdrawals.node IS 'The node''s name.';
COMMENT ON COLUMN ops.withdrawals.booking_id IS 'The ended booking.';
COMMENT ON COLUMN ops.withdrawals.reservation_id IS 'Its reservation.';
COMMENT ON COLUMN ops.withdrawals.device_uuid IS 'The GPU''s uuid.';
COMMENT ON COLUMN ops.withdrawals.withdrawn_generation IS 'The spec generation that withdraws the device.';
COMMENT ON COLUMN ops.withdrawals.observed_generation IS 'The spec generation the node last acknowledged.';
COMMENT ON COLUMN ops.withdrawals.withdrawal_acked_generation IS 'The generation at which the node confirmed it (NULL here: not yet).';
COMMENT ON COLUMN ops.withdrawals.fenced_by IS 'Who fenced the node out of band (ops.node_fence).';
COMMENT ON COLUMN ops.withdrawals.fenced_reason IS 'Why.';
COMMENT ON COLUMN ops.withdrawals.fenced_at IS 'When.';

CREATE FUNCTION ops.node_fence(p_node text, p_reason text)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
-- Lock order: the node's grants (UPDATE), then the audit chain (compute.audit_record).
DECLARE
    v_node_id uuid := ops.node_id(p_node);
    v_count   integer;
BEGIN
    IF p_reason IS NULL OR length(btrim(p_reason)) = 0 OR length(p_reason) > 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'fencing a node needs a reason',
            'Say how the node was fenced out of band (power cut, processes stopped by hand), in 1-1000 characters: it is audited.');
    END IF;
    UPDATE compute.node_grants AS g SET fenced_by = session_user, fenced_reason = p_reason, fenced_at = compute.compute_now()
     WHERE g.node_id = v_node_id AND g.withdrawn_generation IS NOT NULL AND g.withdrawal_acked_generation IS NULL AND g.fenced_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    PERFORM compute.audit_record((SELECT s.tenant_id FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
                                   WHERE n.node_id = v_node_id),
        'db:' || session_user::text, 'compute:nodes:fence', 'compute-node', v_node_id::text, 'allow', p_reason, '[]', NULL,
        pg_catalog.jsonb_build_object('withdrawals', v_count));
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION ops.node_fence(text, text) IS 'The operator fenced the node out of band: its unconfirmed withdrawals count as done (audited); the next holders still need the node to expose their devices.';
