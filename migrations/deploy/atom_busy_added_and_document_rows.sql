-- Deploy better_compute:atom_busy_added_and_document_rows to pg
-- Bookings insert adds the new holds' windows to atom_busy (no recompute from bookings); reservation_document reads readiness and CDI names from the rows it joined (no per-booking reads)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.atom_busy_bookings_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
-- Lock order: the atom_busy rows, in atom_id order (as compute.atom_busy_refresh).
DECLARE
    v_atoms uuid[];
    v_from  timestamptz;
BEGIN
    -- The atoms a changed held booking covers (before or after the change). Three statements: a
    -- transition table exists only for the events that have it.
    IF TG_OP = 'INSERT' THEN
        -- Added holds only add busy time, so each covered atom's windows grow by theirs: exact,
        -- with no read of bookings (an end or a move, below, may free time that another hold still
        -- covers, so those recompute). The rows are locked first, in atom_id order; the UPDATE then
        -- applies the union to their newest versions, so a concurrent refresh is never lost.
        v_from := compute.compute_now();
        PERFORM 1 FROM compute.atom_busy AS s
         WHERE s.atom_id IN (SELECT x.atom_id FROM changed_bookings AS c
                               JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
                              WHERE c.state = 'held')
         ORDER BY s.atom_id FOR UPDATE;
        UPDATE compute.atom_busy AS s
           SET busy = s.busy * pg_catalog.tstzmultirange(tstzrange(v_from, NULL)) + w.busy
          FROM (SELECT x.atom_id, pg_catalog.range_agg(c.during * tstzrange(v_from, NULL)) AS busy
                  FROM changed_bookings AS c
                  JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
                 WHERE c.state = 'held'
                 GROUP BY x.atom_id) AS w
         WHERE s.atom_id = w.atom_id;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT pg_catalog.array_agg(DISTINCT x.atom_id) INTO v_atoms
          FROM previous_bookings AS c
          JOIN compute.atoms AS x ON x.device_id = c.device_id AND x.slices && c.slices AND x.shares && c.shares
         WHERE c.state = 'held';
    ELSE
        SELECT pg_catalog.array_agg(DISTINCT x.atom_id) INTO v_atoms
          FROM changed_bookings AS c JOIN previous_bookings AS p USING (booking_id)
          CROSS JOIN LATERAL (VALUES (c.device_id, c.slices, c.shares, c.state), (p.device_id, p.slices, p.shares, p.state))
                             AS v(device_id, slices, shares, state)
          JOIN compute.atoms AS x ON x.device_id = v.device_id AND x.slices && v.slices AND x.shares && v.shares
         WHERE v.state = 'held' AND (c.state, c.during, c.atom_id) IS DISTINCT FROM (p.state, p.during, p.atom_id);
    END IF;
    IF v_atoms IS NOT NULL THEN
        PERFORM compute.atom_busy_refresh(v_atoms);
    END IF;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.atom_busy_bookings_changed() IS 'Keep compute.atom_busy: add inserted holds'' windows; recompute the atoms whose held bookings ended, moved or were deleted.';

CREATE OR REPLACE FUNCTION compute.atom_cdi_name(p_atom compute.atoms, p_gpu_uuid text, p_inventory jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- Of the atom, its GPU's uuid and its node's inventory, as a query that joined them has them
    -- (one expression: inlined into the caller's query).
    SELECT compute.cdi_name(p_atom.kind, p_gpu_uuid, CASE WHEN p_atom.kind = 'mig'
                            THEN compute.inventory_mig_uuid(p_inventory, p_gpu_uuid, p_atom.profile, p_atom.placement) END)
$function$;

COMMENT ON FUNCTION compute.atom_cdi_name(compute.atoms,text,jsonb) IS 'CDI device name of an atom on a GPU (its uuid) of a node (its inventory), NULL where the node cannot expose it.';

CREATE OR REPLACE FUNCTION compute.atom_cdi_name(p_atom_id uuid)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
-- The CDI device name a node exposes for an atom (compute.cdi_name), NULL where it cannot.
-- (PL/pgSQL, like the other per-reservation helpers: its plan is kept instead of made per call.)
BEGIN
    RETURN (SELECT compute.atom_cdi_name(a, d.uuid, n.inventory)
              FROM compute.atoms AS a
              JOIN compute.devices AS d ON d.device_id = a.device_id
              JOIN compute.nodes AS n ON n.node_id = a.node_id
             WHERE a.atom_id = p_atom_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN (SELECT compute.booking_readiness(b, r.state, r.instance_kind)
              FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
             WHERE b.booking_id = p_booking_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.booking_readiness(p_booking compute.bookings, p_reservation_state text, p_instance_kind text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.booking_readiness(compute.bookings,text,text) IS 'Whether a booking''s device is usable, given the booking and its reservation''s state and instance kind: {state, reason}.';

CREATE OR REPLACE FUNCTION compute.reservation_document(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

COMMIT;
