-- Deploy better_compute:ready_means_usable to pg
-- Ready means usable, released means withdrawn (issue 13.5, 13.6): the spec names each booking and
-- carries the withdrawal grace period; node_grants records the generations that granted and withdrew
-- each booking and what the node reported; reservations and their devices answer their readiness.
-- It comes after gpu_conditions_and_mig_layouts, whose versions of node_spec_document,
-- node_spec_refresh and reservation_document it extends (the revert puts those back).
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

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

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now       timestamptz := compute.compute_now();
    v_booking   compute.bookings;
    v_state     text;
    v_grant     compute.node_grants;
    v_spec      compute.node_specs;
    v_node      text;
    v_heard     text;
    v_previous  text;
    v_failed    text;
BEGIN
    SELECT * INTO v_booking FROM compute.bookings AS b WHERE b.booking_id = p_booking_id;
    SELECT r.state INTO v_state FROM compute.reservations AS r WHERE r.reservation_id = v_booking.reservation_id;
    IF v_state = 'provisional' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'waiting for the admission''s decision');
    ELSIF v_state <> 'active' OR v_booking.state <> 'active' OR upper(v_booking.during) <= v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'ended');
    ELSIF lower(v_booking.during) > v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason',
            pg_catalog.format('starts at %s', pg_catalog.to_char(lower(v_booking.during) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
    END IF;
    SELECT n.name, CASE WHEN ns.closed_at IS NULL AND ns.last_heard_at > v_now - compute.limit('session_timeout_seconds') * interval '1 second'
                        THEN 'connected'
                        WHEN ns.last_heard_at IS NULL THEN 'not connected, never heard'
                        ELSE pg_catalog.format('not connected, last heard %s s ago', round(extract(epoch FROM v_now - ns.last_heard_at))) END
      INTO v_node, v_heard
      FROM compute.nodes AS n LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
     WHERE n.node_id = v_booking.node_id;
    SELECT * INTO v_grant FROM compute.node_grants AS g WHERE g.booking_id = p_booking_id;
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = v_booking.node_id;
    IF v_grant.booking_id IS NULL OR v_grant.withdrawn_generation IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('the spec of node %s does not grant the device yet (its tick adds bookings as they start)', v_node));
    END IF;
    -- Earlier holders of the same slices of this GPU whose withdrawal the node has not confirmed.
    SELECT pg_catalog.format('; generation %s withdraws reservation %s from this GPU', g.withdrawn_generation, b.reservation_id)
      INTO v_previous
      FROM compute.node_grants AS g JOIN compute.bookings AS b ON b.booking_id = g.booking_id
     WHERE g.node_id = v_booking.node_id AND g.withdrawn_generation IS NOT NULL AND g.withdrawal_acked_generation IS NULL
       AND g.fenced_at IS NULL AND b.booking_id <> p_booking_id AND b.device_id = v_booking.device_id
       AND b.slices && v_booking.slices AND b.shares && v_booking.shares
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
$function$;

COMMENT ON FUNCTION compute.booking_readiness(bigint) IS 'Whether a booking''s device is usable: {state: ready|waiting_for_node|failed|not_running, reason}.';

CREATE OR REPLACE FUNCTION compute.bookings_readiness(p_bookings jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.bookings_readiness(jsonb) IS 'A reservation''s readiness from its bookings'': failed if a device failed, ready when all are, else why it waits.';

CREATE OR REPLACE FUNCTION compute.node_observed(p_node_id uuid, p_body jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.node_observed(uuid,jsonb) IS 'A node''s verified acknowledgement: the generation applied, its conditions, per booking whether it is exposed, and what it withdrew.';

CREATE OR REPLACE FUNCTION compute.node_report_apply(p_report_id bigint, p_public_key bytea)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
-- Lock order: the report row, the node's identity row (one verifier per node at a time), then what
-- the report's effect locks (node_register: the node and its devices; node_specs; node_commands).
DECLARE
    v_report   compute.node_reports;
    v_identity compute.node_identities;
    v_body     jsonb;
    v_epoch    bigint;
    v_seq      bigint;
    v_reason   text;
BEGIN
    SELECT * INTO v_report FROM compute.node_reports AS r WHERE r.report_id = p_report_id AND r.state = 'pending' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- decided already
    END IF;
    SELECT * INTO v_identity FROM compute.node_identities AS i WHERE i.node_id = v_report.node_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.node_report_reject(p_report_id, 'the node has no registered key (it never joined)');
        RETURN false;
    END IF;
    IF v_identity.public_key IS DISTINCT FROM p_public_key THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('the key of node %s is not the one the report was verified with', v_report.node_id),
            'Verify the report again with the key worker_api.node_reports_pending answers now.');
    END IF;
    IF EXISTS (SELECT 1 FROM compute.node_reports AS r WHERE r.node_id = v_report.node_id AND r.state = 'pending'
                  AND (r.epoch, r.report_id) < (v_report.epoch, v_report.report_id)) THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('an earlier report of node %s is still pending', v_report.node_id),
            'Decide the node''s reports in the order worker_api.node_reports_pending answers them.');
    END IF;
    v_body := v_report.envelope -> 'body';
    -- The body binds the node, the session it was sent under and its place in that session.
    IF v_body ->> 'node_id' IS DISTINCT FROM v_report.node_id::text THEN
        v_reason := 'the report names another node';
    ELSIF pg_catalog.jsonb_typeof(v_body -> 'epoch') IS DISTINCT FROM 'number' OR pg_catalog.jsonb_typeof(v_body -> 'seq') IS DISTINCT FROM 'number'
          OR (v_body ->> 'epoch') !~ '^[0-9]{1,18}$' OR (v_body ->> 'seq') !~ '^[0-9]{1,18}$' THEN
        v_reason := 'the report needs an integer epoch and seq';
    ELSE
        v_epoch := (v_body ->> 'epoch')::bigint;
        v_seq := (v_body ->> 'seq')::bigint;
        IF v_epoch <> v_report.epoch THEN
            v_reason := pg_catalog.format('the report was signed in session epoch %s and relayed in epoch %s', v_epoch, v_report.epoch);
        ELSIF (v_epoch, v_seq) <= (v_identity.report_epoch, v_identity.report_seq) THEN
            v_reason := pg_catalog.format('replayed or out of order: (epoch %s, seq %s) is not after (%s, %s), the last report applied',
                                          v_epoch, v_seq, v_identity.report_epoch, v_identity.report_seq);
        END IF;
    END IF;
    IF v_reason IS NULL THEN
        UPDATE compute.node_identities SET report_epoch = v_epoch, report_seq = v_seq WHERE node_id = v_report.node_id;
        BEGIN
            CASE v_report.envelope ->> 'purpose'
                WHEN 'node.inventory' THEN
                    PERFORM compute.node_inventory_reported(v_report.node_id, v_body -> 'inventory');
                WHEN 'node.observed' THEN
                    PERFORM compute.node_observed(v_report.node_id, v_body);
                WHEN 'node.result' THEN
                    PERFORM compute.node_command_result(v_report.node_id, compute.report_uuid(v_body, 'command_id'),
                                                        v_body ->> 'status', v_body ->> 'output');
                WHEN 'node.key' THEN
                    PERFORM compute.node_key_replace(v_report.node_id, compute.report_base64(v_body, 'public_key'));
                ELSE
                    PERFORM compute.raise_error('UNSUPPORTED', pg_catalog.format('no report of purpose %L', pg_catalog.left(v_report.envelope ->> 'purpose', 64)),
                        'A node reports node.inventory, node.observed, node.result or node.key.');
            END CASE;
        EXCEPTION WHEN OTHERS THEN
            -- A contract error (what the node said is invalid) rejects the report; any other error
            -- (a deadlock, the database restarting) fails the worker's run, which tries again.
            IF pg_catalog.left(SQLSTATE, 2) <> 'BC' THEN
                RAISE;
            END IF;
            v_reason := SQLERRM;
        END;
    END IF;
    IF v_reason IS NOT NULL THEN
        PERFORM compute.node_report_reject(p_report_id, v_reason);
        RETURN false;
    END IF;
    DELETE FROM compute.node_reports WHERE report_id = p_report_id;
    RETURN true;
END
$function$;

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
    -- Each booking is named by its id: the node reports per booking whether it exposed it (Ready
    -- means usable, compute.node_observed). The withdrawal policy says how long processes still
    -- using a GPU or MIG instance no booking grants may take to stop before the node kills them.
    -- And per present GPU, the layout valid now and since when; for a MIG-capable GPU the MIG mode
    -- and GPU instances (profile@placement) it must have, which the daemon converges (issue 13).
    RETURN pg_catalog.jsonb_build_object('node_id', p_node_id,
        'devices', (SELECT coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until, 'booking_id', x.booking_id)
                       ORDER BY x.index, x.placement, x.slot), '[]')
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until, b.booking_id,
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
             WHERE d.node_id = p_node_id AND d.present),
        'withdrawal', pg_catalog.jsonb_build_object('grace_seconds', compute.limit('withdrawal_grace_seconds')));
END
$function$;

COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation (by booking), the withdrawal policy, and each GPU''s layout (MIG mode and instances).';

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
        -- Which generation granted each booking and which withdrew it (a device is ready only once
        -- the node acknowledged both: compute.booking_readiness).
        INSERT INTO compute.node_grants (booking_id, node_id, granted_generation)
        SELECT (d ->> 'booking_id')::bigint, p_node_id, v_generation FROM pg_catalog.jsonb_array_elements(v_document -> 'devices') AS d
        ON CONFLICT (booking_id) DO UPDATE
            SET granted_generation = EXCLUDED.granted_generation, withdrawn_generation = NULL, report_generation = NULL,
                exposure = NULL, reason = NULL, withdrawal_acked_generation = NULL, fenced_by = NULL, fenced_reason = NULL, fenced_at = NULL
          WHERE compute.node_grants.withdrawn_generation IS NOT NULL;
        UPDATE compute.node_grants AS g SET withdrawn_generation = v_generation
         WHERE g.node_id = p_node_id AND g.withdrawn_generation IS NULL
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_document -> 'devices') AS d
                            WHERE (d ->> 'booking_id')::bigint = g.booking_id);
    END IF;
    IF v_spec.signed_generation IS DISTINCT FROM v_generation THEN
        PERFORM compute.work_poke('node.spec.sign', p_node_id::text);
    END IF;
    RETURN v_generation;
END
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_document(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now      timestamptz := compute.compute_now();
    v_bookings jsonb;
BEGIN
    -- The bookings first: the reservation's readiness is made of theirs (computed once each).
    v_bookings := coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'atom_id', a.atom_id, 'node', n.name, 'device_uuid', d.uuid, 'kind', a.kind,
                       'profile', a.profile, 'placement', a.placement, 'slot', a.slot,
                       'cdi_name', compute.atom_cdi_name(a.atom_id), 'state', b.state,
                       'readiness', compute.booking_readiness(b.booking_id),
                       'conditions', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                 'type', c.type, 'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                 'message', c.message, 'since', c.since) ORDER BY c.type), '[]')
                                        FROM compute.device_conditions AS c WHERE c.device_id = d.device_id))
                   ORDER BY n.name, d.index, a.placement, a.slot)
              FROM compute.bookings AS b
              JOIN compute.atoms AS a ON a.atom_id = b.atom_id
              JOIN compute.devices AS d ON d.device_id = b.device_id
              JOIN compute.nodes AS n ON n.node_id = b.node_id
             WHERE b.reservation_id = p_reservation_id), '[]');
    RETURN (SELECT pg_catalog.jsonb_build_object(
        'reservation_id', r.reservation_id, 'tenant_id', r.tenant_id, 'project_id', r.project_id,
        'pool_id', r.pool_id, 'shape', r.shape, 'count', r.count, 'state', r.state,
        'phase', CASE WHEN r.state NOT IN ('provisional', 'active') THEN 'ended'
                      WHEN upper(r.during) <= v_now THEN 'ended'
                      WHEN lower(r.during) > v_now THEN 'upcoming' ELSE 'running' END,
        'start', lower(r.during), 'end', upper(r.during), 'same_node', r.same_node,
        'expires_at', r.expires_at, 'hold_until', r.hold_until, 'created_at', r.created_at,
        'ended_at', r.ended_at, 'end_reason', r.end_reason,
        'readiness', compute.bookings_readiness(v_bookings), 'bookings', v_bookings)
      FROM compute.reservations AS r
     WHERE r.reservation_id = p_reservation_id);
END
$function$;

CREATE OR REPLACE FUNCTION ops.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.booking_readiness(p_booking_id) $function$;

COMMENT ON FUNCTION ops.booking_readiness(bigint) IS 'A booking''s readiness (what ops.readiness shows), for operators.';

GRANT EXECUTE ON FUNCTION ops.booking_readiness(bigint) TO bc_operator;

CREATE OR REPLACE FUNCTION ops.node_fence(p_node text, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
$function$;

COMMENT ON FUNCTION ops.node_fence(text,text) IS 'The operator fenced the node out of band: its unconfirmed withdrawals count as done (audited); the next holders still need the node to expose their devices.';

GRANT EXECUTE ON FUNCTION ops.node_fence(text,text) TO bc_operator;

COMMENT ON TABLE compute.node_grants IS 'Per booking a node''s spec granted: the generations that granted and withdrew it, and what the node reported.';

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('withdrawal_grace_seconds', 30, 'seconds',
     'After a booking ends, how long a process still using its GPU or MIG instance may take to stop (SIGTERM) before the node kills it (carried in the spec).');

CREATE VIEW ops.readiness AS
    SELECT b.booking_id, b.reservation_id, b.tenant_id, n.name AS node, b.node_id, d.uuid AS device_uuid, a.kind, a.profile, a.placement,
           a.slot, x.r ->> 'state' AS state, x.r ->> 'reason' AS reason, g.granted_generation, s.observed_generation
      FROM compute.bookings AS b
      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
      JOIN compute.devices AS d ON d.device_id = b.device_id
      JOIN compute.nodes AS n ON n.node_id = b.node_id
      LEFT JOIN compute.node_grants AS g ON g.booking_id = b.booking_id
      LEFT JOIN compute.node_specs AS s ON s.node_id = b.node_id
      CROSS JOIN LATERAL (SELECT ops.booking_readiness(b.booking_id) AS r) AS x
     WHERE b.state = 'active' AND b.during @> ops.now();

COMMENT ON VIEW ops.readiness IS 'Every booking holding now: ready, waiting_for_node or failed, and why.';

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

SELECT compute.node_spec_refresh(s.node_id) FROM (SELECT node_id FROM compute.node_specs ORDER BY node_id) AS s;

COMMIT;
