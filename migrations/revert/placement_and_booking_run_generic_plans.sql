-- Revert better_compute:placement_and_booking_run_generic_plans from pg
-- compute.place and compute.reserve_hold run generic plans: the device lock, the recheck and the bookings INSERT were planned on every admission
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.reserve_hold(p_request jsonb)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMIT;
