-- A reservation's life (docs/architecture.md §6-7):
--   reserve     -> provisional (bookings written once as held: exclusive, expiring after provisional_seconds)
--   activate    provisional -> active (the reservation row only: its held bookings are active from then on)
--   void        provisional -> void (bookings void)
--   release     active: running -> released (during truncated to end now), not started -> cancelled
--   extend      move the end (later, or earlier but not before now), checked like a new booking
--   renew       push hold_until forward for a reservation that holds with a lease
--   expire      sweep: provisional past expires_at -> void; held past hold_until -> expired/cancelled
-- Lock order everywhere: reservation row (or its idempotency key), quota rows, devices.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.inventory_mig_uuid(p_inventory jsonb, p_gpu_uuid text, p_profile text, p_placement integer)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
-- The MIG UUID of the MIG device a MIG atom (profile, placement) of GPU p_gpu_uuid is on a node
-- with this inventory: the one MIG device it reports on that GPU, in MIG mode, with that profile
-- and placement. NULL where there is none (not created yet, or another profile at that placement:
-- a GPU re-laid while its old instances still exist) or several (a GPU instance split into compute
-- instances is not one device). (PL/pgSQL: its plan is kept, where a SQL function's would be made
-- per call of atom_cdi_name.)
BEGIN
    RETURN (SELECT CASE WHEN pg_catalog.count(*) = 1 THEN pg_catalog.min(i ->> 'uuid') END
              FROM pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(p_inventory -> 'devices') = 'array'
                                                        THEN p_inventory -> 'devices' ELSE '[]' END) AS dev,
                   pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(dev #> '{mig,instances}') = 'array'
                                                        THEN dev #> '{mig,instances}' ELSE '[]' END) AS i
             WHERE dev ->> 'uuid' = p_gpu_uuid AND dev #>> '{mig,mode}' = 'enabled'
               AND i -> 'profile' = pg_catalog.to_jsonb(p_profile) AND i -> 'placement' = pg_catalog.to_jsonb(p_placement));
END
$$;
COMMENT ON FUNCTION compute.inventory_mig_uuid(jsonb, text, text, integer) IS
    'The MIG UUID of the one MIG device of a GPU, profile and placement an inventory reports; else NULL.';

CREATE FUNCTION compute.mig_cdi_device(p_mig_uuid text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    -- The CDI device name of a MIG device: its MIG UUID; a legacy UUID (drivers before R470:
    -- MIG-GPU-<gpu uuid>/<gi>/<ci>), which CDI names cannot hold ('/'), as MIG-GPU-<gpu uuid>-gi<gi>-ci<ci>;
    -- NULL for anything else (CDI's rule: [A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?, and never a
    -- name nvidia-ctk gives another meaning: <index>, <gpu index>:<mig index>, all).
    SELECT CASE
        WHEN p_mig_uuid ~ '^MIG-GPU-[0-9A-Fa-f-]+/[0-9]+/[0-9]+$'
        THEN pg_catalog.regexp_replace(p_mig_uuid, '^(MIG-GPU-[0-9A-Fa-f-]+)/([0-9]+)/([0-9]+)$', '\1-gi\2-ci\3')
        WHEN p_mig_uuid ~ '^MIG-[A-Za-z0-9_.-]*[A-Za-z0-9]$' THEN p_mig_uuid
    END
$$;
COMMENT ON FUNCTION compute.mig_cdi_device(text) IS 'The CDI device name of a MIG UUID (a legacy one rewritten), or NULL where it makes none.';

CREATE FUNCTION compute.cdi_name(p_kind text, p_gpu_uuid text, p_mig_uuid text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    -- The CDI device name (kind nvidia.com/gpu) of an atom of this kind on GPU p_gpu_uuid: a whole GPU
    -- or slot by the GPU's uuid, a MIG atom by its MIG device (p_mig_uuid, compute.inventory_mig_uuid);
    -- NULL where the node cannot expose it: it is then not exposed, and the node reports a condition.
    SELECT 'nvidia.com/gpu=' || CASE p_kind WHEN 'mig' THEN compute.mig_cdi_device(p_mig_uuid) ELSE p_gpu_uuid END
$$;
COMMENT ON FUNCTION compute.cdi_name(text, text, text) IS 'CDI device name of an atom of a kind, GPU and MIG device (nvidia.com/gpu=...), or NULL.';

CREATE FUNCTION compute.atom_cdi_name(p_atom compute.atoms, p_gpu_uuid text, p_inventory jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    -- Of the atom, its GPU's uuid and its node's inventory, as a query that joined them has them
    -- (one expression: inlined into the caller's query).
    SELECT compute.cdi_name(p_atom.kind, p_gpu_uuid, CASE WHEN p_atom.kind = 'mig'
                            THEN compute.inventory_mig_uuid(p_inventory, p_gpu_uuid, p_atom.profile, p_atom.placement) END)
$$;
COMMENT ON FUNCTION compute.atom_cdi_name(compute.atoms, text, jsonb) IS
    'CDI device name of an atom on a GPU (its uuid) of a node (its inventory), NULL where the node cannot expose it.';

CREATE FUNCTION compute.atom_cdi_name(p_atom_id uuid)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
-- The CDI device name a node exposes for an atom (compute.cdi_name), NULL where it cannot.
-- (PL/pgSQL, like the other per-reservation helpers: its plan is kept instead of made per call.)
BEGIN
    RETURN (SELECT compute.atom_cdi_name(a, d.uuid, n.inventory)
              FROM compute.atoms AS a
              JOIN compute.devices AS d ON d.device_id = a.device_id
              JOIN compute.nodes AS n ON n.node_id = a.node_id
             WHERE a.atom_id = p_atom_id);
END
$$;
COMMENT ON FUNCTION compute.atom_cdi_name(uuid) IS 'CDI device name of an atom (nvidia.com/gpu=...), NULL where its node cannot expose it.';

CREATE FUNCTION compute.reservation_document(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now      timestamptz := compute.compute_now();
    v_bookings jsonb;
BEGIN
    -- The bookings first: the reservation's readiness is made of theirs (computed once each, from
    -- the rows read here: no further read of a booking, its reservation or its atom per booking).
    v_bookings := coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'atom_id', a.atom_id, 'node', n.name, 'device_uuid', d.uuid, 'kind', a.kind,
                       'profile', a.profile, 'placement', a.placement, 'slot', a.slot,
                       'cdi_name', compute.atom_cdi_name(a, d.uuid, n.inventory), 'state', compute.booking_state(b.state, r.state),
                       'readiness', compute.booking_readiness(b, r.state, r.instance_kind),
                       'conditions', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                 'type', c.type, 'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                 'message', c.message, 'since', c.since) ORDER BY c.type), '[]')
                                        FROM compute.device_conditions AS c WHERE c.device_id = d.device_id))
                   ORDER BY n.name, d.index, a.placement, a.slot)
              FROM compute.bookings AS b
              JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
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
$$;
COMMENT ON FUNCTION compute.reservation_document(uuid) IS 'A reservation and its bookings as the API answers (docs/architecture.md §17).';

CREATE FUNCTION compute.reservation_replay(p_tenant_id uuid, p_key text, p_hash text)
RETURNS uuid
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_existing compute.reservations;
BEGIN
    -- The tenant's reservation under an idempotency key, as it is now (NULL: none); another request
    -- under the same key is IDEMPOTENCY_MISMATCH naming the reservation the key belongs to.
    IF p_key IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_existing FROM compute.reservations AS r WHERE r.tenant_id = p_tenant_id AND r.idempotency_key = p_key;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_existing.request_hash <> p_hash THEN
        PERFORM compute.raise_error('IDEMPOTENCY_MISMATCH',
            pg_catalog.format('idempotency key %L was used for a different request', p_key),
            pg_catalog.format('Use a new key for a new request; the key belongs to reservation %s.', v_existing.reservation_id));
    END IF;
    RETURN v_existing.reservation_id;
END
$$;
COMMENT ON FUNCTION compute.reservation_replay(uuid, text, text) IS 'The reservation a tenant''s idempotency key names (NULL: none); IDEMPOTENCY_MISMATCH for another request.';

CREATE FUNCTION compute.reserve_hold(p_request jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
-- Lock order: the idempotency key (unique index), quota rows, devices (SKIP LOCKED, in compute.place),
-- the booked atoms' atom_busy rows (the bookings trigger).
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
    v_replay     uuid;
    v_atoms      uuid[];
    v_fraction   numeric;
    v_kind       text;
    v_limits     bigint[];     -- atoms_per_reservation, reservation_window_seconds, provisional_seconds: read once
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
    -- The offering's instance kind: devices unless an instance flow books (instances.create: vps);
    -- shape bare_metal books whole machines (compute.place_machines, sql/700_machines.sql).
    v_kind := coalesce(compute.request_field(p_request, 'instance_kind', 'string', false) #>> '{}',
                       CASE WHEN v_shape = 'bare_metal' THEN 'bare_metal' ELSE 'devices' END);
    IF length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use 1 to 200 characters, e.g. a uuid.');
    END IF;

    -- 2. Idempotency first: a retry gets the stored answer, even once its window has started or ended.
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to((pg_catalog.jsonb_build_object(
        'tenant_id', v_tenant_id, 'project_id', v_project_id, 'pool_id', v_pool_id, 'shape', v_shape, 'count', v_count,
        'start', extract(epoch FROM v_start), 'end', extract(epoch FROM v_end),
        'same_node', v_same_node, 'hold_seconds', v_hold)
        || CASE WHEN v_kind <> 'devices' THEN pg_catalog.jsonb_build_object('instance_kind', v_kind) ELSE '{}' END)::text, 'UTF8')), 'hex');
    v_replay := compute.reservation_replay(v_tenant_id, v_key, v_hash);
    IF v_replay IS NOT NULL THEN
        RETURN v_replay;
    END IF;

    -- 3. The pool (the tenant's: another tenant's pool reads as missing; an operator's site has no
    --    tenant and is the operator's to book), its offering, and the window against now.
    v_pool := compute.pool_get(v_pool_id);
    v_limits := compute.limits_get(ARRAY['atoms_per_reservation', 'reservation_window_seconds', 'provisional_seconds']);
    IF (SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = v_pool.site_id) <> v_tenant_id THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', v_pool_id),
            'List the pools in ops.pool_capacity, or create one with compute.pool_create.');
    END IF;
    SELECT * INTO v_offering FROM compute.offerings AS o
     WHERE o.pool_id = v_pool.pool_id AND o.shape = v_shape AND o.instance_kind = v_kind;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('pool %s does not offer %s', v_pool.name, v_shape),
            coalesce('Shapes offered: ' || (SELECT pg_catalog.string_agg(o.shape, ', ' ORDER BY o.shape) FROM compute.offerings AS o
                                             WHERE o.pool_id = v_pool.pool_id AND o.instance_kind = v_kind) || '.',
                     'This pool offers nothing yet.'));
    END IF;
    IF v_count < 1 OR v_count > least(v_offering.max_count, v_limits[1]) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('count %s is out of range', v_count),
            pg_catalog.format('Ask for 1 to %s atoms of %s.', least(v_offering.max_count, v_limits[1]), v_shape));
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
    IF v_end - v_start > least(v_offering.max_duration, v_limits[2] * interval '1 second') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('a window of %s is too long', v_end - v_start),
            pg_catalog.format('Ask for at most %s.', least(v_offering.max_duration, v_limits[2] * interval '1 second')));
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
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at, instance_kind)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + v_limits[3] * interval '1 second', v_hold,
            v_now + v_hold * interval '1 second', v_key, v_hash, v_now, v_kind)
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
        v_atoms := CASE WHEN v_kind = 'bare_metal' THEN compute.place_machines(v_pool.pool_id, v_count, v_during)
                        ELSE compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node) END;
        -- Written once, held: activation changes the reservation row only.
        WITH booked AS (
            INSERT INTO compute.bookings (reservation_id, tenant_id, project_id, site_id, pool_id, node_id, device_id, atom_id,
                                          slices, shares, gpu_fraction, during, state)
            SELECT v_id, v_tenant_id, v_project_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
                   a.slices, a.shares, a.gpu_fraction, v_during, 'held'
              FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms)
            RETURNING gpu_fraction)
        SELECT sum(b.gpu_fraction) INTO v_fraction FROM booked AS b;
    EXCEPTION WHEN exclusion_violation OR deadlock_detected THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('%s x %s in pool %s were taken by a concurrent reservation', v_count, v_shape, v_pool.name),
            'Try again: placement looks for other free atoms; compute.capacity_earliest finds free windows.');
    END;
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, pg_catalog.cardinality(v_atoms), v_fraction, v_id);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION compute.reserve_hold(jsonb) IS
    'Place and book a reservation request as provisional; its id (an idempotency key''s reservation on a replay). compute.reserve answers the document.';

CREATE FUNCTION compute.reserve(p_request jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_id uuid;
BEGIN
    -- The document is built once, here; api.prepare needs only the id and a few attributes
    -- (compute.reserve_hold). Two statements: the document's (STABLE) must see the rows just written.
    v_id := compute.reserve_hold(p_request);
    RETURN compute.reservation_document(v_id);
END
$$;
COMMENT ON FUNCTION compute.reserve(jsonb) IS 'Place and book a reservation request (docs/architecture.md §17) as provisional; replays by idempotency key.';

CREATE FUNCTION compute.reservation_lock(p_reservation_id uuid)
RETURNS compute.reservations
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations;
BEGIN
    SELECT * INTO v_reservation FROM compute.reservations AS r WHERE r.reservation_id = p_reservation_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no reservation %s', p_reservation_id), 'Check the reservation id.');
    END IF;
    RETURN v_reservation;
END
$$;
COMMENT ON FUNCTION compute.reservation_lock(uuid) IS 'The reservation row, locked FOR UPDATE; NOT_FOUND when there is none.';

CREATE FUNCTION compute.reservation_end(p_reservation compute.reservations, p_at timestamptz, p_state text, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- End a live reservation at p_at: not started by then -> its bookings are void and it never
    -- held anything; started -> during is truncated to [start, p_at) and kept as history.
    IF p_reservation.state = 'provisional' OR lower(p_reservation.during) >= p_at THEN
        UPDATE compute.bookings SET state = 'void' WHERE reservation_id = p_reservation.reservation_id;
        UPDATE compute.reservations
           SET state = CASE WHEN p_reservation.state = 'provisional' THEN 'void' ELSE 'cancelled' END,
               expires_at = NULL, ended_at = compute.compute_now(), end_reason = p_reason
         WHERE reservation_id = p_reservation.reservation_id;
    ELSE
        UPDATE compute.bookings SET state = 'released', during = tstzrange(lower(during), least(upper(during), p_at))
         WHERE reservation_id = p_reservation.reservation_id;
        UPDATE compute.reservations
           SET state = p_state, during = tstzrange(lower(during), least(upper(during), p_at)),
               ended_at = compute.compute_now(), end_reason = p_reason
         WHERE reservation_id = p_reservation.reservation_id;
    END IF;
END
$$;
COMMENT ON FUNCTION compute.reservation_end(compute.reservations, timestamptz, text, text) IS 'End a live reservation at a time: void/cancel it if it had not started, else truncate it.';

CREATE FUNCTION compute.reservation_activate(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
BEGIN
    IF v_reservation.state = 'active' THEN
        RETURN compute.reservation_document(p_reservation_id);
    END IF;
    IF v_reservation.state <> 'provisional' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s is %s', p_reservation_id, v_reservation.state),
            'Only a provisional reservation can be activated; reserve again.');
    END IF;
    IF v_reservation.expires_at <= compute.compute_now() THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT', pg_catalog.format('reservation %s expired at %s', p_reservation_id, v_reservation.expires_at),
            'Its atoms were held only briefly; reserve again.');
    END IF;
    -- The bookings stay as written (held): that they are active now is the reservation's state.
    UPDATE compute.reservations SET state = 'active', expires_at = NULL, activated_at = compute.compute_now()
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;
COMMENT ON FUNCTION compute.reservation_activate(uuid) IS 'provisional -> active (idempotent); CAPACITY_CONFLICT once its provisional hold expired.';

CREATE FUNCTION compute.reservation_void(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
BEGIN
    IF v_reservation.state = 'provisional' THEN
        PERFORM compute.reservation_end(v_reservation, compute.compute_now(), 'void', 'voided');
    ELSIF v_reservation.state = 'active' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s is active', p_reservation_id),
            'An active reservation is released, not voided: call compute.reservation_release.');
    END IF;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;
COMMENT ON FUNCTION compute.reservation_void(uuid) IS 'provisional -> void (idempotent on ended reservations).';

CREATE FUNCTION compute.reservation_release(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
    v_now         timestamptz := compute.compute_now();
BEGIN
    -- Ended reservations (and active ones whose window is over) are left as they are.
    IF v_reservation.state IN ('provisional', 'active') AND upper(v_reservation.during) > v_now THEN
        PERFORM compute.reservation_end(v_reservation, v_now, 'released', 'released');
        PERFORM compute.node_drains_complete();
    END IF;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;
COMMENT ON FUNCTION compute.reservation_release(uuid) IS 'Release now: a running reservation ends now (history kept), a future one is cancelled, a provisional one void.';

CREATE FUNCTION compute.reservation_extend_check(p_reservation compute.reservations, p_new_end timestamptz,
                                                p_expected_end timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
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
     WHERE o.pool_id = p_reservation.pool_id AND o.shape = p_reservation.shape AND o.instance_kind = p_reservation.instance_kind;
    IF p_new_end - lower(p_reservation.during) > coalesce(v_max, interval '0') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the extended window is too long', pg_catalog.format('Windows of this offering last at most %s.', v_max));
    END IF;
END
$$;
COMMENT ON FUNCTION compute.reservation_extend_check(compute.reservations, timestamptz, timestamptz) IS 'INVALID_ARGUMENT (or GENERATION_CONFLICT) unless a reservation may be extended to the new end.';

CREATE FUNCTION compute.reservation_extend(p_reservation_id uuid, p_new_end timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the reservation row, quota rows, devices (FOR UPDATE, device_id order).
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
    v_during      tstzrange;
    v_fraction    numeric;
    v_conflict    boolean;
BEGIN
    PERFORM compute.reservation_extend_check(v_reservation, p_new_end, NULL);
    v_during := tstzrange(lower(v_reservation.during), p_new_end);

    PERFORM 1 FROM compute.quotas AS q
     WHERE q.tenant_id = v_reservation.tenant_id AND q.pool_id = v_reservation.pool_id
       AND (q.project_id IS NULL OR q.project_id = v_reservation.project_id)
     ORDER BY q.quota_id FOR UPDATE;
    PERFORM 1 FROM compute.devices AS d
     WHERE d.device_id IN (SELECT b.device_id FROM compute.bookings AS b WHERE b.reservation_id = p_reservation_id)
     ORDER BY d.device_id FOR UPDATE;
    SELECT sum(b.gpu_fraction) INTO v_fraction FROM compute.bookings AS b WHERE b.reservation_id = p_reservation_id;
    PERFORM compute.quota_check(v_reservation.tenant_id, v_reservation.project_id, v_reservation.pool_id, v_during,
                                v_reservation.count, v_fraction, p_reservation_id);
    -- Checked under the device locks, bookings read through a btree (compute.atom_held); the exclusion
    -- constraint is the last word.
    v_conflict := EXISTS (SELECT 1 FROM compute.bookings AS mine JOIN compute.atoms AS a ON a.atom_id = mine.atom_id
                           WHERE mine.reservation_id = p_reservation_id AND compute.atom_held(a, v_during, p_reservation_id));
    IF NOT v_conflict THEN
        BEGIN
            UPDATE compute.bookings SET during = v_during WHERE reservation_id = p_reservation_id;
        EXCEPTION WHEN exclusion_violation THEN
            v_conflict := true;
        END;
    END IF;
    IF v_conflict THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('reservation %s cannot be extended to %s', p_reservation_id, p_new_end),
            'Another reservation holds some of its atoms within the longer window; compute.capacity_earliest finds free windows.');
    END IF;
    UPDATE compute.reservations SET during = v_during WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;
COMMENT ON FUNCTION compute.reservation_extend(uuid, timestamptz) IS 'Move a live reservation''s end; CAPACITY_CONFLICT or QUOTA_EXCEEDED when the longer window does not fit.';

CREATE FUNCTION compute.reservation_renew_check(p_reservation compute.reservations)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- api.prepare asks this before the IAM decision, compute.reservation_renew again under the row lock.
    IF p_reservation.hold_seconds IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s holds without a lease', p_reservation.reservation_id),
            'Only reservations made with hold_seconds are renewed.');
    END IF;
    IF p_reservation.state NOT IN ('provisional', 'active') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s is %s', p_reservation.reservation_id, p_reservation.state),
            'Reserve again.');
    END IF;
    -- A lease that lapsed is over, whether or not the expiry sweep has run yet.
    IF p_reservation.hold_until <= compute.compute_now() THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('the lease of reservation %s lapsed at %s', p_reservation.reservation_id, p_reservation.hold_until),
            'A lease holds only while it is renewed in time; reserve again.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.reservation_renew_check(compute.reservations) IS 'INVALID_ARGUMENT (or CAPACITY_CONFLICT once lapsed) unless a reservation''s lease may be renewed.';

CREATE FUNCTION compute.reservation_renew(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
BEGIN
    PERFORM compute.reservation_renew_check(v_reservation);
    UPDATE compute.reservations SET hold_until = compute.compute_now() + hold_seconds * interval '1 second'
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;
COMMENT ON FUNCTION compute.reservation_renew(uuid) IS 'Renew a reservation''s lease: hold_until = now + hold_seconds.';

CREATE FUNCTION compute.reservations_expire()
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: reservation rows, SKIP LOCKED (a reservation being changed right now is left for the next sweep).
DECLARE
    v_now         timestamptz := compute.compute_now();
    v_reservation compute.reservations;
    v_done        integer := 0;
BEGIN
    FOR v_reservation IN
        SELECT * FROM compute.reservations AS r
         WHERE (r.state = 'provisional' AND r.expires_at <= v_now)
            OR (r.state = 'active' AND r.hold_until <= v_now AND upper(r.during) > r.hold_until)
         ORDER BY r.reservation_id
         LIMIT compute.limit('sweep_batch')
           FOR UPDATE SKIP LOCKED
    LOOP
        IF v_reservation.state = 'provisional' THEN
            PERFORM compute.reservation_end(v_reservation, v_now, 'void', 'provisional hold expired');
        ELSE
            PERFORM compute.reservation_end(v_reservation, v_reservation.hold_until, 'expired', 'lease not renewed');
        END IF;
        v_done := v_done + 1;
    END LOOP;
    IF v_done > 0 THEN
        PERFORM compute.node_drains_complete();
    END IF;
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION compute.reservations_expire() IS 'Sweep: void provisional reservations past expiry, end held ones past hold_until; returns how many (at most sweep_batch).';
