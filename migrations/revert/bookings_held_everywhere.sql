-- Revert better_compute:bookings_held_everywhere from pg
-- ops.devices, compute.fleet_metrics and the machines' reservation checks read a live booking as held (bookings are written once as held since bookings_held)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.fleet_metrics()
 RETURNS TABLE(metric text, help text, labels jsonb, value double precision)
 LANGUAGE sql
 STABLE
AS $function$
    WITH now_ AS (
        SELECT compute.compute_now() AS t,
               compute.limit('metric_label_values') AS label_values,
               compute.limit('session_timeout_seconds') * interval '1 second' AS silence
    ), pools AS (
        SELECT p.pool_id, s.name || '/' || p.name AS pool
          FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
         ORDER BY s.name, p.name
         LIMIT (SELECT now_.label_values FROM now_)
    ), gpu_states AS (
        -- Each physical GPU once, in the first state that applies; counted once per pool and state.
        SELECT n.pool_id,
               CASE WHEN NOT d.present THEN 'absent'
                    WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                                  WHERE b.device_id = d.device_id AND b.site_id = d.site_id
                                    AND b.state IN ('provisional', 'active') AND b.during @> now_.t) THEN 'held'
                    WHEN EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id) THEN 'flagged'
                    WHEN EXISTS (SELECT 1 FROM compute.device_conditions AS c
                                  WHERE c.device_id = d.device_id AND c.critical) THEN 'unhealthy'
                    WHEN ns.closed_at IS NOT NULL OR ns.last_heard_at IS NULL
                         OR ns.last_heard_at <= now_.t - now_.silence THEN 'disconnected'
                    ELSE 'free' END AS state
          FROM now_, compute.devices AS d
          JOIN compute.nodes AS n ON n.node_id = d.node_id
          LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
    ), gpu_counts AS (
        SELECT g.pool_id, g.state, count(*) AS n FROM gpu_states AS g GROUP BY g.pool_id, g.state
    ), node_sessions AS (
        SELECT n.pool_id,
               CASE WHEN ns.node_id IS NULL THEN 'never'
                    WHEN ns.closed_at IS NOT NULL THEN 'closed'
                    WHEN ns.last_heard_at <= now_.t - now_.silence THEN 'silent'
                    ELSE 'connected' END AS session
          FROM now_, compute.nodes AS n
          LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
    ), session_counts AS (
        SELECT x.pool_id, x.session, count(*) AS n FROM node_sessions AS x GROUP BY x.pool_id, x.session
    ), kinds AS (
        SELECT w.kind, w.state, count(*) AS items,
               max(now_.t - w.run_at) FILTER (WHERE w.state = 'pending' AND w.run_at <= now_.t) AS overdue
          FROM now_, compute.work AS w
         WHERE w.state IN ('pending', 'running')
         GROUP BY w.kind, w.state
    )
    -- GPUs by state per pool: every pool has every state, zero included, so a rule sees a pool empty.
    SELECT 'bc_fleet_gpus', 'Physical GPUs by pool and state (absent, held now in whole or part, on a flagged node, unhealthy, '
                            'on a disconnected node, free).',
           pg_catalog.jsonb_build_object('pool', p.pool, 'state', st.state), coalesce(c.n, 0)::double precision
      FROM pools AS p
     CROSS JOIN unnest(ARRAY['absent', 'held', 'flagged', 'unhealthy', 'disconnected', 'free']) AS st(state)
      LEFT JOIN gpu_counts AS c ON c.pool_id = p.pool_id AND c.state = st.state
    UNION ALL
    SELECT 'bc_fleet_nodes', 'Nodes by pool and session (connected, silent past session_timeout_seconds, closed, never opened).',
           pg_catalog.jsonb_build_object('pool', p.pool, 'session', se.session), coalesce(c.n, 0)::double precision
      FROM pools AS p
     CROSS JOIN unnest(ARRAY['connected', 'silent', 'closed', 'never']) AS se(session)
      LEFT JOIN session_counts AS c ON c.pool_id = p.pool_id AND c.session = se.session
    UNION ALL
    SELECT 'bc_fleet_admissions_pending', 'Admissions prepared and not yet decided (provisional rows held).',
           '{}'::jsonb, (SELECT count(*) FROM compute.admissions AS a WHERE a.state = 'pending')::double precision
    UNION ALL
    SELECT 'bc_fleet_admissions_pending_oldest_seconds', 'Age of the oldest undecided admission (0 when none).',
           '{}'::jsonb,
           coalesce((SELECT extract(epoch FROM now_.t - min(a.created_at)) FROM compute.admissions AS a
                      WHERE a.state = 'pending'), 0)::double precision
      FROM now_
    UNION ALL
    SELECT 'bc_fleet_work_items', 'Live work items by kind and state (pending, running).',
           pg_catalog.jsonb_build_object('kind', k.kind, 'state', k.state), k.items::double precision
      FROM (SELECT * FROM kinds ORDER BY kind, state LIMIT (SELECT now_.label_values FROM now_)) AS k
    UNION ALL
    SELECT 'bc_fleet_work_overdue_seconds', 'How long the most overdue pending item of a kind has been due (0: none due).',
           pg_catalog.jsonb_build_object('kind', k.kind),
           coalesce(extract(epoch FROM k.overdue), 0)::double precision
      FROM (SELECT * FROM kinds WHERE state = 'pending' ORDER BY kind LIMIT (SELECT now_.label_values FROM now_)) AS k
    UNION ALL
    SELECT 'bc_fleet_webhook_deliveries_pending', 'Webhook deliveries not yet delivered nor dead (the backlog).',
           '{}'::jsonb, (SELECT count(*) FROM compute.webhook_deliveries AS d WHERE d.state = 'pending')::double precision
    UNION ALL
    SELECT 'bc_fleet_webhook_deliveries_pending_oldest_seconds', 'Age of the oldest pending webhook delivery (0 when none).',
           '{}'::jsonb,
           coalesce((SELECT extract(epoch FROM now_.t - min(d.created_at)) FROM compute.webhook_deliveries AS d
                      WHERE d.state = 'pending'), 0)::double precision
      FROM now_
$function$;

CREATE OR REPLACE FUNCTION compute.machine_operator_move(p_machine text, p_event text, p_reason text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_machine compute.machines := compute.machine_get(p_machine, true);
    v_holder  compute.reservations;
BEGIN
    IF p_event = 'release' THEN  -- a tenant's machine is cleaned when its reservation ends, not under it
        SELECT r.* INTO v_holder FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
         WHERE b.node_id = v_machine.node_id AND r.instance_kind = 'bare_metal' AND b.state IN ('provisional', 'active')
           AND b.during @> compute.compute_now()
         LIMIT 1;
        IF FOUND THEN
            PERFORM compute.raise_error('CAPACITY_CONFLICT',
                pg_catalog.format('machine %s is held by bare_metal reservation %s until %s', v_machine.name, v_holder.reservation_id,
                                  upper(v_holder.during)),
                'Its release (or its end) cleans the machine; ask its tenant to release it, or wait.');
        END IF;
    END IF;
    RETURN compute.machine_json(compute.machine_transition(v_machine.machine_id, p_event,
        CASE WHEN p_event = 'abort' THEN coalesce('aborted: ' || p_reason, 'aborted by an operator') END, true));
END
$function$;

CREATE OR REPLACE FUNCTION compute.machine_reservation_ended(p_machine compute.machines)
 RETURNS uuid
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- A bare_metal reservation that held the machine's node and ended (released, expired or its
    -- window over) after the machine became active; NULL when none did.
    RETURN (SELECT r.reservation_id FROM compute.reservations AS r
             WHERE r.instance_kind = 'bare_metal' AND r.state IN ('active', 'released', 'expired')
               AND upper(r.during) <= compute.compute_now() AND upper(r.during) > p_machine.state_since
               AND EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.reservation_id = r.reservation_id AND b.node_id = p_machine.node_id AND b.state IN ('active', 'released'))
             ORDER BY upper(r.during) LIMIT 1);
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
    -- The offering's instance kind: devices unless an instance flow books (instances.create: vps).
    v_kind := coalesce(compute.request_field(p_request, 'instance_kind', 'string', false) #>> '{}', 'devices');
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
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at, instance_kind)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + compute.limit('provisional_seconds') * interval '1 second', v_hold,
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
        v_atoms := compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node);
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
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, v_count, v_fraction, v_id);
    RETURN v_id;
END
$function$;

CREATE OR REPLACE VIEW ops.devices AS
 WITH now_ AS (
         SELECT ops.now() AS t
        )
 SELECT d.uuid AS device_uuid,
    s.name AS site,
    p.name AS pool,
    n.name AS node,
    d.index,
    d.model,
    d.memory_mib,
    d.layout,
    d.layout_since,
    d.present,
    ( SELECT count(*) AS count
           FROM compute.atoms a
          WHERE a.device_id = d.device_id AND a.valid @> now_.t) AS atoms,
    ( SELECT count(*) AS count
           FROM compute.atoms a
          WHERE a.device_id = d.device_id AND a.valid @> now_.t AND (EXISTS ( SELECT 1
                   FROM compute.bookings b
                  WHERE b.atom_id = a.atom_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND b.during @> now_.t))) AS atoms_held_now,
    ( SELECT array_agg(c.type ORDER BY c.type) AS array_agg
           FROM compute.device_conditions c
          WHERE c.device_id = d.device_id AND c.critical) AS critical_conditions,
    d.pci_bus_id,
    d.numa_node,
    d.nvlink_peers,
    d.mig_supported,
    d.device_id,
    d.node_id,
    n.pool_id,
    d.site_id
   FROM now_,
    compute.devices d
     JOIN compute.nodes n ON n.node_id = d.node_id
     JOIN compute.pools p ON p.pool_id = n.pool_id
     JOIN compute.sites s ON s.site_id = d.site_id;

COMMIT;
