-- Revert better_compute:instances from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM api.methods WHERE method LIKE 'instances.%';

DROP VIEW ops.instances;

DROP TRIGGER node_specs_instances ON compute.node_specs;

DELETE FROM compute.limits WHERE name IN ('instance_ssh_keys', 'instance_disk_gib_max');

UPDATE api.methods SET summary = 'Offer a shape in a pool (or change the offer''s limits).',
    input_schema = input_schema #- '{properties,vcpus_per_atom}' #- '{properties,memory_mib_per_atom}'
 WHERE method = 'offerings.create';

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.api_instances_console_url(uuid,jsonb);

DROP FUNCTION compute.api_instances_create(uuid,text,jsonb);

DROP FUNCTION compute.api_instances_delete(uuid,text,jsonb);

DROP FUNCTION compute.api_instances_list(uuid,jsonb);

DROP FUNCTION compute.api_instances_reboot(uuid,text,jsonb);

DROP FUNCTION compute.api_instances_show(uuid,jsonb);

DROP FUNCTION compute.api_instances_start(uuid,text,jsonb);

DROP FUNCTION compute.api_instances_stop(uuid,text,jsonb);

DROP FUNCTION compute.api_instances_void(text);

DROP FUNCTION compute.instance_document(uuid);

DROP FUNCTION compute.instance_gpus(uuid);

DROP FUNCTION compute.instance_lock(uuid);

DROP FUNCTION compute.instance_power(uuid,text);

DROP FUNCTION compute.instance_prepare(uuid,jsonb);

DROP FUNCTION compute.instances_observed(uuid,jsonb);

DROP FUNCTION compute.instances_settle(uuid);

DROP FUNCTION compute.node_spec_instances(uuid);

CREATE OR REPLACE FUNCTION compute.api_offerings_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_offering_id uuid;
    v_kind        text := coalesce(compute.input_text(p_input, 'instance_kind', false), 'devices');
BEGIN
    IF v_kind <> 'devices' THEN  -- fail closed (P11): the kind exists in the model, its flow does not yet
        PERFORM compute.raise_error('UNSUPPORTED', pg_catalog.format('%s offerings are not supported yet', v_kind),
            'Offer devices (GPUs, MIG instances, time-slice slots); bare metal and VPS come with their provisioning flows.');
    END IF;
    -- An offer of a shape the pool already offers changes its limits (and keeps its id).
    v_offering_id := compute.offering_create(compute.input_uuid(p_input, 'pool_id'), compute.input_text(p_input, 'shape'),
        compute.input_integer(p_input, 'max_count'), compute.input_integer(p_input, 'max_duration_seconds') * interval '1 second',
        'devices', p_resource_id::uuid);
    RETURN (SELECT compute.offering_json(o) FROM compute.offerings AS o WHERE o.offering_id = v_offering_id);
END
$function$;

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

CREATE OR REPLACE FUNCTION compute.offering_json(p_offering compute.offerings)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('offering_id', p_offering.offering_id, 'pool_id', p_offering.pool_id,
        'shape', p_offering.shape, 'max_count', p_offering.max_count,
        'max_duration_seconds', extract(epoch FROM p_offering.max_duration)::bigint, 'created_at', p_offering.created_at);
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_extend_check(p_reservation compute.reservations, p_new_end timestamp with time zone, p_expected_end timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
    v_max interval;
BEGIN
    -- What an extension needs besides free atoms and quota: api.prepare asks it before the IAM
    -- decision (on the row as it reads), compute.reservation_extend again under the row lock.
    -- With expected_end, the change applies only to the end the caller saw (compare and set), so
    -- two clients extending at once cannot undo each other unknowingly.
    IF p_expected_end IS NOT NULL AND upper(p_reservation.during) IS DISTINCT FROM p_expected_end THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT',
            pg_catalog.format('reservation %s ends at %s, not %s', p_reservation.reservation_id, upper(p_reservation.during), p_expected_end),
            'Someone changed it meanwhile: read it again (reservations.get) and decide on its current end.');
    END IF;
    IF p_reservation.state NOT IN ('provisional', 'active') OR upper(p_reservation.during) <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s has ended', p_reservation.reservation_id),
            'Reserve again for a new window.');
    END IF;
    IF p_new_end IS NULL OR p_new_end <= greatest(lower(p_reservation.during), v_now) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the new end must come after the start and after now',
            'To end a reservation now, release it.');
    END IF;
    SELECT least(o.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') INTO v_max
      FROM compute.offerings AS o
     WHERE o.pool_id = p_reservation.pool_id AND o.shape = p_reservation.shape AND o.instance_kind = 'devices';
    IF p_new_end - lower(p_reservation.during) > coalesce(v_max, interval '0') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the extended window is too long', pg_catalog.format('Windows of this offering last at most %s.', v_max));
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION compute.reserve(p_request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
-- Lock order: the idempotency key (unique index), quota rows, devices (SKIP LOCKED, in compute.place).
DECLARE
    v_now        timestamptz := compute.compute_now();
    v_tenant_id  uuid;
    v_project_id uuid;
    v_pool_id    uuid;
    v_pool       compute.pools;
    v_offering   compute.offerings;
    v_shape      text;
    v_count      integer;
    v_start      timestamptz;
    v_end        timestamptz;
    v_same_node  boolean;
    v_hold       integer;
    v_key        text;
    v_hash       text;
    v_during     tstzrange;
    v_id         uuid := pg_catalog.gen_random_uuid();
    v_replay     jsonb;
    v_atoms      uuid[];
    v_fraction   numeric;
BEGIN
    -- 1. The request's fields, each of its type (nothing here depends on the time or on the fleet).
    IF p_request IS NULL OR pg_catalog.jsonb_typeof(p_request) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a reservation request is a JSON object', 'See docs/architecture.md §17 for its fields.');
    END IF;
    v_tenant_id := compute.request_field(p_request, 'tenant_id', 'uuid', true) #>> '{}';
    v_project_id := compute.request_field(p_request, 'project_id', 'uuid', false) #>> '{}';
    v_pool_id := compute.request_field(p_request, 'pool_id', 'uuid', true) #>> '{}';
    v_shape := compute.request_field(p_request, 'shape', 'string', true) #>> '{}';
    v_count := coalesce(compute.request_field(p_request, 'count', 'integer', false)::integer, 1);
    v_start := compute.request_timestamp(p_request, 'start', false);
    v_end := compute.request_timestamp(p_request, 'end', true);
    v_same_node := coalesce((compute.request_field(p_request, 'same_node', 'boolean', false))::boolean, false);
    v_hold := compute.request_field(p_request, 'hold_seconds', 'integer', false)::integer;
    v_key := compute.request_field(p_request, 'idempotency_key', 'string', false) #>> '{}';
    IF length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use 1 to 200 characters, e.g. a uuid.');
    END IF;

    -- 2. Idempotency first: a retry gets the stored answer, even once its window has started or ended.
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
        'tenant_id', v_tenant_id, 'project_id', v_project_id, 'pool_id', v_pool_id, 'shape', v_shape, 'count', v_count,
        'start', extract(epoch FROM v_start), 'end', extract(epoch FROM v_end),
        'same_node', v_same_node, 'hold_seconds', v_hold)::text, 'UTF8')), 'hex');
    v_replay := compute.reservation_replay(v_tenant_id, v_key, v_hash);
    IF v_replay IS NOT NULL THEN
        RETURN v_replay;
    END IF;

    -- 3. The pool (the tenant's: another tenant's pool reads as missing; an operator's site has no
    --    tenant and is the operator's to book), its offering, and the window against now.
    v_pool := compute.pool_get(v_pool_id);
    IF (SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = v_pool.site_id) <> v_tenant_id THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', v_pool_id),
            'List the pools in ops.pool_capacity, or create one with compute.pool_create.');
    END IF;
    SELECT * INTO v_offering FROM compute.offerings AS o
     WHERE o.pool_id = v_pool.pool_id AND o.shape = v_shape AND o.instance_kind = 'devices';
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('pool %s does not offer %s', v_pool.name, v_shape),
            coalesce('Shapes offered: ' || (SELECT pg_catalog.string_agg(o.shape, ', ' ORDER BY o.shape) FROM compute.offerings AS o
                                             WHERE o.pool_id = v_pool.pool_id AND o.instance_kind = 'devices') || '.',
                     'This pool offers nothing yet.'));
    END IF;
    IF v_count < 1 OR v_count > least(v_offering.max_count, compute.limit('atoms_per_reservation')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('count %s is out of range', v_count),
            pg_catalog.format('Ask for 1 to %s atoms of %s.', least(v_offering.max_count, compute.limit('atoms_per_reservation')), v_shape));
    END IF;
    v_start := coalesce(v_start, v_now);
    IF v_start < v_now - interval '1 minute' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('start %s is in the past', v_start),
            'Omit start (or pass null) to begin now.');
    END IF;
    v_start := greatest(v_start, v_now);  -- a start up to a minute in the past (clock skew) means now
    IF v_end <= v_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'end must come after start', 'Pass an end later than the start (or than now).');
    END IF;
    IF v_end - v_start > least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('a window of %s is too long', v_end - v_start),
            pg_catalog.format('Ask for at most %s.', least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second')));
    END IF;
    IF v_hold IS NOT NULL AND (v_hold < 1 OR v_hold > compute.limit('hold_seconds_max')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('hold_seconds %s is out of range', v_hold),
            pg_catalog.format('Use 1 to %s seconds, or omit it for no lease.', compute.limit('hold_seconds_max')));
    END IF;
    PERFORM compute.project_check(v_tenant_id, v_project_id);
    PERFORM compute.tenant_ensure(v_tenant_id);
    v_during := tstzrange(v_start, v_end);

    -- 4. Claim the key by inserting the reservation; a concurrent holder of the same key makes us
    --    wait for its commit, then we replay its answer (or report the mismatch).
    INSERT INTO compute.reservations (reservation_id, tenant_id, project_id, site_id, pool_id, shape, count, during, same_node,
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + compute.limit('provisional_seconds') * interval '1 second', v_hold,
            v_now + v_hold * interval '1 second', v_key, v_hash, v_now)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN compute.reservation_replay(v_tenant_id, v_key, v_hash);
    END IF;

    -- 5. Quota rows are locked before any device (lock order); counted once the atoms are known.
    --    Placement checked before booking, so an exclusion violation or a deadlock here is a race
    --    lost to a concurrent booking: CAPACITY_CONFLICT, as the contract names it.
    BEGIN
        PERFORM 1 FROM compute.quotas AS q
         WHERE q.tenant_id = v_tenant_id AND q.pool_id = v_pool.pool_id AND (q.project_id IS NULL OR q.project_id = v_project_id)
         ORDER BY q.quota_id FOR UPDATE;
        v_atoms := compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node);
        INSERT INTO compute.bookings (reservation_id, tenant_id, project_id, site_id, pool_id, node_id, device_id, atom_id,
                                      slices, shares, gpu_fraction, during, state)
        SELECT v_id, v_tenant_id, v_project_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
               a.slices, a.shares, a.gpu_fraction, v_during, 'provisional'
          FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    EXCEPTION WHEN exclusion_violation OR deadlock_detected THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('%s x %s in pool %s were taken by a concurrent reservation', v_count, v_shape, v_pool.name),
            'Try again: placement looks for other free atoms; compute.capacity_earliest finds free windows.');
    END;
    SELECT sum(a.gpu_fraction) INTO v_fraction FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, v_count, v_fraction, v_id);
    RETURN compute.reservation_document(v_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.resource_describe(p_type text, p_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
-- {"tenantId", "parent": {"type", "id"} | null, "attributes"} of an existing resource; NULL when
-- there is none (or the id is not an id of that type). Sites without a tenant are nobody's here.
DECLARE
    v_uuid uuid;
BEGIN
    IF p_type = 'compute-audit-event' THEN
        RETURN (SELECT pg_catalog.jsonb_build_object('tenantId', e.tenant_id, 'parent', NULL,
                           'attributes', pg_catalog.jsonb_build_object('action', e.action))
                  FROM compute.audit_events AS e
                 WHERE p_id ~ '^[0-9]{1,18}$' AND e.event_id = p_id::bigint);
    END IF;
    IF p_id IS NULL OR p_id !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN NULL;
    END IF;
    v_uuid := p_id::uuid;
    RETURN CASE p_type
        WHEN 'compute-site' THEN
            (SELECT compute.resource_json(s.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', s.name))
               FROM compute.sites AS s WHERE s.site_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-pool' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-site', s.site_id::text,
                        pg_catalog.jsonb_build_object('name', p.name, 'gpu_model', p.gpu_model, 'placement_policy', p.placement_policy))
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-quota' THEN  -- a quota is named by its pool (and the project in its attributes)
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', p.pool_id::text, '{}')
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-offering' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', o.pool_id::text,
                        pg_catalog.jsonb_build_object('shape', o.shape))
               FROM compute.offerings AS o JOIN compute.pools AS p ON p.pool_id = o.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE o.offering_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-node' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', n.pool_id::text, pg_catalog.jsonb_build_object('name', n.name))
               FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
              WHERE n.node_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-join-token' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', j.pool_id::text, pg_catalog.jsonb_build_object('state', j.state))
               FROM compute.join_tokens AS j JOIN compute.pools AS p ON p.pool_id = j.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE j.token_id = v_uuid)
        WHEN 'compute-project' THEN
            (SELECT compute.resource_json(p.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', p.name))
               FROM compute.projects AS p WHERE p.project_id = v_uuid)
        WHEN 'compute-reservation' THEN
            (SELECT compute.resource_json(r.tenant_id, 'compute-pool', r.pool_id::text,
                        pg_catalog.jsonb_build_object('state', r.state, 'shape', r.shape, 'count', r.count, 'project_id', r.project_id))
               FROM compute.reservations AS r WHERE r.reservation_id = v_uuid)
        WHEN 'compute-webhook' THEN
            (SELECT compute.resource_json(w.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('active', w.active))
               FROM compute.webhooks AS w WHERE w.webhook_id = v_uuid)
        END;
END
$function$;

COMMENT ON TABLE compute.instance_transitions IS NULL;

COMMENT ON TABLE compute.instances IS NULL;

DROP TABLE compute.instances;

DROP TABLE compute.instance_transitions;

ALTER TABLE compute.reservations DROP COLUMN instance_kind;

ALTER TABLE compute.offerings DROP CONSTRAINT offerings_vps_sizes, DROP COLUMN vcpus_per_atom, DROP COLUMN memory_mib_per_atom;

DROP FUNCTION compute.instance_changed();

DROP FUNCTION compute.instance_state_guard();

DROP FUNCTION compute.instances_spec_changed();

COMMIT;
