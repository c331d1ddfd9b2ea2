-- Revert better_compute:bookings_held_readers from pg
-- Readers of active holds go through compute.active_bookings; activation updates the reservation row only; node specs refresh on activation
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER reservations_node_spec ON compute.reservations;
CREATE TRIGGER bookings_node_spec_insert AFTER INSERT ON compute.bookings
    REFERENCING NEW TABLE AS changed_bookings FOR EACH STATEMENT EXECUTE FUNCTION compute.node_spec_bookings_changed();

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.booking_state(text,text);

CREATE OR REPLACE FUNCTION compute.atom_held(p_atom compute.atoms, p_during tstzrange, p_excluding uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The check placement (step 4) and extend make under the device lock, so it must not miss a row:
    -- it finds the device's atoms (a table written only when inventory or layouts change), then
    -- their live bookings through the btree bookings_atom_live, never through the GiST index
    -- bookings_exclusive. Under concurrent writes to a young, growing bookings table,
    -- PostgreSQL 15's GiST scans of that index were seen to miss committed live bookings for
    -- seconds, and its exclusion check to let an overlapping one in (docs/capacity.md). A booking
    -- holds exactly its atom's device, slices and shares (compute.booking_matches_atom), so the
    -- bookings that overlap p_atom are the live bookings of the device's atoms that overlap it.
    RETURN EXISTS (
        SELECT 1 FROM compute.atoms AS x
          JOIN compute.bookings AS b ON b.atom_id = x.atom_id
         WHERE x.device_id = p_atom.device_id AND x.slices && p_atom.slices AND x.shares && p_atom.shares
           AND b.state IN ('provisional', 'active') AND b.reservation_id IS DISTINCT FROM p_excluding
           AND upper(b.during) > lower(p_during) AND lower(b.during) < upper(p_during));
END
$function$;

CREATE OR REPLACE FUNCTION compute.atom_keeps_its_bookings()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_blocking text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT b.reservation_id::text, ', ') INTO v_blocking
      FROM compute.bookings AS b
     WHERE b.atom_id = OLD.atom_id AND b.state IN ('provisional', 'active')
       AND (TG_OP = 'DELETE' OR NOT NEW.valid @> b.during);
    IF v_blocking IS NOT NULL THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT', pg_catalog.format('atom %s is booked outside its new validity', OLD.atom_id),
            pg_catalog.format('Release or wait for reservations %s first.', v_blocking));
    END IF;
    RETURN coalesce(NEW, OLD);
END
$function$;

CREATE OR REPLACE FUNCTION compute.booking_matches_atom()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_atom compute.atoms;
BEGIN
    IF NEW.state NOT IN ('provisional', 'active') THEN
        RETURN NEW;
    END IF;
    SELECT * INTO v_atom FROM compute.atoms AS a WHERE a.atom_id = NEW.atom_id;
    IF (v_atom.device_id, v_atom.site_id, v_atom.node_id, v_atom.pool_id, v_atom.slices, v_atom.shares)
       IS DISTINCT FROM (NEW.device_id, NEW.site_id, NEW.node_id, NEW.pool_id, NEW.slices, NEW.shares) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('booking does not match atom %s', NEW.atom_id),
            'Bookings are written by compute.reserve; copy device, slices and shares from the atom.');
    END IF;
    IF NOT v_atom.valid @> NEW.during THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('atom %s is valid during %s, not during %s', NEW.atom_id, v_atom.valid, NEW.during),
            'The GPU''s layout changes within this window: book a window inside the atom''s validity.');
    END IF;
    RETURN NEW;
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
    v_kind      text;
BEGIN
    SELECT * INTO v_booking FROM compute.bookings AS b WHERE b.booking_id = p_booking_id;
    SELECT r.state, r.instance_kind INTO v_state, v_kind FROM compute.reservations AS r WHERE r.reservation_id = v_booking.reservation_id;
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
                  FROM compute.instances AS i WHERE i.reservation_id = v_booking.reservation_id);
    END IF;
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

CREATE OR REPLACE FUNCTION compute.capacity_earliest_start(p_pool_id uuid, p_shape text, p_count integer, p_duration interval, p_from timestamp with time zone, p_horizon timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
    -- One sweep: for each schedulable atom of the shape, its free gaps between live bookings (of
    -- any shape: a whole-GPU booking blocks its MIG atoms) within its validity; a gap admits starts
    -- in [gap start, gap end - duration]; a running count over those intervals finds the first
    -- instant at which p_count atoms admit a start.
    WITH atoms AS (
        SELECT a.atom_id, a.device_id, a.slices, a.shares,
               greatest(lower(a.valid), p_from) AS valid_from, coalesce(upper(a.valid), 'infinity') AS valid_to
          FROM compute.atoms AS a
         WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND a.valid && tstzrange(p_from, p_horizon + p_duration)
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
    ), busy AS (
        SELECT a.atom_id, lower(b.during) AS busy_from, upper(b.during) AS busy_to
          FROM atoms AS a
          JOIN compute.bookings AS b ON b.device_id = a.device_id AND b.slices && a.slices AND b.shares && a.shares
         WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active') AND b.during && tstzrange(p_from, p_horizon + p_duration)
    ), edges AS (
        SELECT b.atom_id, b.busy_from,
               max(b.busy_to) OVER (PARTITION BY b.atom_id ORDER BY b.busy_from ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prior_end
          FROM busy AS b
    ), gaps AS (
        SELECT e.atom_id, greatest(a.valid_from, coalesce(e.prior_end, a.valid_from)) AS gap_from, least(e.busy_from, a.valid_to) AS gap_to
          FROM edges AS e JOIN atoms AS a ON a.atom_id = e.atom_id
        UNION ALL
        SELECT a.atom_id, greatest(a.valid_from, coalesce(max(b.busy_to), a.valid_from)), a.valid_to
          FROM atoms AS a LEFT JOIN busy AS b ON b.atom_id = a.atom_id
         GROUP BY a.atom_id, a.valid_from, a.valid_to
    ), changes AS (
        SELECT g.gap_from AS t, 1 AS delta FROM gaps AS g WHERE g.gap_to >= g.gap_from + p_duration
        UNION ALL
        SELECT g.gap_to - p_duration, -1 FROM gaps AS g WHERE g.gap_to >= g.gap_from + p_duration AND g.gap_to <> 'infinity'
    ), running AS (
        SELECT c.t, sum(c.delta) OVER (ORDER BY c.t, c.delta DESC ROWS UNBOUNDED PRECEDING) AS admitting FROM changes AS c
    )
    SELECT min(r.t) FROM running AS r WHERE r.admitting >= p_count AND r.t <= p_horizon
$function$;

CREATE OR REPLACE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamp with time zone, p_end timestamp with time zone)
 RETURNS TABLE(node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    PERFORM compute.pool_get(p_pool_id);
    -- The live bookings of the pool that overlap the window (one index scan), then the schedulable
    -- atoms of the shape with none of those on their slices and shares, as a hash anti-join on the
    -- device: no per-atom or per-booking index probe, no per-atom function call (the checks of
    -- compute.atom_is_schedulable are spelled out for that reason).
    RETURN QUERY
    WITH busy AS MATERIALIZED (
        SELECT b.device_id, b.slices, b.shares
          FROM compute.bookings AS b
         WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active') AND b.during && tstzrange(p_start, p_end)
    ), free AS (
        SELECT a.node_id, a.atom_id, a.device_index, a.slices, a.slot
          FROM compute.atoms AS a
         WHERE a.pool_id = p_pool_id AND a.shape = p_shape
           AND lower(a.valid) <= p_start AND (upper_inf(a.valid) OR upper(a.valid) >= p_end)
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
           AND NOT EXISTS (SELECT 1 FROM busy
                            WHERE busy.device_id = a.device_id AND busy.slices && a.slices AND busy.shares && a.shares)
    ), per_node AS (
        SELECT f.node_id, count(*)::integer AS free_atoms,
               pg_catalog.array_agg(f.atom_id ORDER BY f.device_index, f.slices, f.slot) AS atom_ids
          FROM free AS f GROUP BY f.node_id
    )
    SELECT p.node_id, n.name, p.free_atoms, p.atom_ids
      FROM per_node AS p JOIN compute.nodes AS n ON n.node_id = p.node_id
     ORDER BY n.rank;
END
$function$;

CREATE OR REPLACE FUNCTION compute.device_set_layout(p_device_id uuid, p_layout text, p_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- Lock order: the device row (FOR UPDATE) first, as placement and extension do; then its atoms and
-- bookings; then the node's node_specs row (the devices_node_spec trigger). compute.node_register
-- locks a node's devices before its node_specs row too (one order: node row, devices, node_specs).
-- From v_at on, the GPU has exactly the new layout's atoms: any change scheduled later is called off.
-- An atom is known by its identity (kind, profile, placement, slot, slot_count) in the layout.
DECLARE
    v_at        timestamptz := coalesce(p_at, compute.compute_now());
    v_device    compute.devices;
    v_next      text[];          -- the identities of the new layout's atoms
    v_identity  text;
    v_atom      compute.atoms;
    v_keep      uuid;            -- the atom of v_identity that is valid from v_keep_from on
    v_keep_from timestamptz;
    v_blocking  text;
    v_changed   integer := 0;
    v_count     integer;
BEGIN
    SELECT * INTO v_device FROM compute.devices AS d WHERE d.device_id = p_device_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no device %s', p_device_id), 'List devices in ops.atom_holders.');
    END IF;
    IF v_at < compute.compute_now() THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a layout change cannot be scheduled in the past',
            'Omit the time to change now, or pass a future time.');
    END IF;
    IF NOT pg_catalog.isfinite(v_at) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a layout change needs a finite time',
            'Omit the time to change now, or pass a future time.');
    END IF;
    SELECT pg_catalog.array_agg(ROW(l.kind, l.profile, l.placement, l.slot, l.slot_count)::text) INTO v_next
      FROM compute.layout_atoms(p_device_id, p_layout) AS l;

    -- Refuse: a live booking of an atom that goes away overlaps the change time or comes after it.
    SELECT pg_catalog.string_agg(DISTINCT b.reservation_id::text, ', ') INTO v_blocking
      FROM compute.atoms AS a
      JOIN compute.bookings AS b ON b.atom_id = a.atom_id AND b.state IN ('provisional', 'active')
     WHERE a.device_id = p_device_id AND a.valid && tstzrange(v_at, NULL)
       AND b.during && tstzrange(v_at, NULL)
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    IF v_blocking IS NOT NULL THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('layout %s of GPU %s cannot start at %s: atoms that go away are booked', p_layout, v_device.uuid, v_at),
            pg_catalog.format('Release or wait for reservations %s, or schedule the change after they end.', v_blocking));
    END IF;

    -- Atoms that go away: never valid if they had not started by then, else valid until v_at.
    -- Bookings of atoms that will never exist can only be void ones (live ones refused above): they go too.
    DELETE FROM compute.bookings AS b
     USING compute.atoms AS a
     WHERE b.atom_id = a.atom_id AND a.device_id = p_device_id AND lower(a.valid) >= v_at AND b.state = 'void'
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    DELETE FROM compute.atoms AS a
     WHERE a.device_id = p_device_id AND lower(a.valid) >= v_at
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;
    UPDATE compute.atoms AS a SET valid = tstzrange(lower(a.valid), v_at)
     WHERE a.device_id = p_device_id AND a.valid @> v_at AND lower(a.valid) < v_at
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    -- Atoms that stay keep their rows and bookings. Each identity is one atom from v_at on (from its
    -- start, if it is valid at v_at or ends there). Earlier changes may have left several atoms of
    -- one identity after v_at (whole, then MIG at 10:00, whole again at 20:00: two whole-GPU atoms);
    -- they become one where the bookings allow it, so that a booking may cross the old seam: a later
    -- atom with no live booking hands its other bookings to the kept one and goes; a kept atom with no
    -- booking at all gives way to the later one. Where both hold live bookings they stay two atoms,
    -- the first ending where the second starts. Atoms of other identities no longer overlap [v_at,)
    -- (above), so the kept atom can always grow into the gaps.
    FOREACH v_identity IN ARRAY v_next LOOP
        v_keep := NULL;
        FOR v_atom IN SELECT a.* FROM compute.atoms AS a
                       WHERE a.device_id = p_device_id AND (upper_inf(a.valid) OR upper(a.valid) >= v_at)
                         AND ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = v_identity
                       ORDER BY lower(a.valid) LOOP
            IF v_keep IS NULL THEN
                v_keep := v_atom.atom_id;
                v_keep_from := least(lower(v_atom.valid), v_at);
            ELSIF NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                               WHERE b.atom_id = v_atom.atom_id AND b.state IN ('provisional', 'active')) THEN
                UPDATE compute.bookings AS b SET atom_id = v_keep WHERE b.atom_id = v_atom.atom_id;
                DELETE FROM compute.atoms AS a WHERE a.atom_id = v_atom.atom_id;
                v_changed := v_changed + 1;
            ELSIF NOT EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.atom_id = v_keep) THEN
                DELETE FROM compute.atoms AS a WHERE a.atom_id = v_keep;
                v_changed := v_changed + 1;
                v_keep := v_atom.atom_id;
            ELSE
                UPDATE compute.atoms AS a SET valid = tstzrange(v_keep_from, lower(v_atom.valid))
                 WHERE a.atom_id = v_keep AND a.valid <> tstzrange(v_keep_from, lower(v_atom.valid));
                GET DIAGNOSTICS v_count = ROW_COUNT;
                v_changed := v_changed + v_count;
                v_keep := v_atom.atom_id;
                v_keep_from := lower(v_atom.valid);
            END IF;
        END LOOP;
        IF v_keep IS NOT NULL THEN
            UPDATE compute.atoms AS a SET valid = tstzrange(v_keep_from, NULL)
             WHERE a.atom_id = v_keep AND a.valid <> tstzrange(v_keep_from, NULL);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_changed := v_changed + v_count;
        END IF;
    END LOOP;

    -- New atoms start at v_at.
    INSERT INTO compute.atoms (atom_id, site_id, pool_id, node_id, device_id, node_rank, device_index, kind, profile,
                               placement, slot, slot_count, slices, shares, gpu_fraction, valid)
    SELECT pg_catalog.gen_random_uuid(), v_device.site_id, n.pool_id, v_device.node_id, p_device_id, n.rank,
           v_device.index, l.kind, l.profile, l.placement, l.slot, l.slot_count, l.slices, l.shares, l.gpu_fraction,
           tstzrange(v_at, NULL)
      FROM compute.layout_atoms(p_device_id, p_layout) AS l
      JOIN compute.nodes AS n ON n.node_id = v_device.node_id
     WHERE NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                        WHERE a.device_id = p_device_id AND a.valid @> v_at
                          AND (l.kind, l.profile, l.placement, l.slot, l.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    UPDATE compute.devices SET layout = p_layout, layout_since = v_at WHERE device_id = p_device_id;
    RETURN v_changed;
END
$function$;

CREATE OR REPLACE FUNCTION compute.instance_gpus(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('device_uuid', d.uuid, 'pci_bus_id', d.pci_bus_id)
                                         ORDER BY d.pci_bus_id), '[]')
      FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
     WHERE b.reservation_id = p_reservation_id AND b.state IN ('provisional', 'active');
$function$;

CREATE OR REPLACE FUNCTION compute.instances_settle(p_node_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- Lock order: the node's spec row (read), then its instances.
DECLARE
    v_spec  compute.node_specs;
    v_count integer;
BEGIN
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = p_node_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The booking ended: deleting, from the first spec generation without the instance.
    UPDATE compute.instances AS i SET state = 'deleting', removed_generation = v_spec.generation
     WHERE i.node_id = p_node_id AND i.state IN ('provisioning', 'running', 'stopped', 'failed')
       AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                        WHERE b.reservation_id = i.reservation_id AND b.state = 'active' AND b.during @> compute.compute_now());
    -- The node applied a spec without it: its domain and disk are gone.
    UPDATE compute.instances AS i SET state = 'deleted'
     WHERE i.node_id = p_node_id AND i.state = 'deleting' AND i.removed_generation <= v_spec.observed_generation;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$function$;

CREATE OR REPLACE FUNCTION compute.node_drains_complete()
 RETURNS integer
 LANGUAGE sql
AS $function$
    WITH done AS (
        UPDATE compute.node_flags AS f SET completed_at = compute.compute_now()
         WHERE f.flag = 'draining' AND f.completed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.node_id = f.node_id AND b.state IN ('provisional', 'active')
                              AND b.during @> compute.compute_now())
        RETURNING 1)
    SELECT count(*)::integer FROM done
$function$;

CREATE OR REPLACE FUNCTION compute.node_spec_bookings_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Only bookings active now change what a node exposes now (future ones: the tick, when they
    -- start). One refresh per node, in node order (the same lock order in every transaction).
    -- (Two statements: a transition table exists only for the event that has it.)
    IF TG_OP = 'INSERT' THEN
        PERFORM compute.node_spec_refresh(x.node_id)
           FROM (SELECT DISTINCT c.node_id FROM changed_bookings AS c
                  WHERE c.state = 'active' AND c.during @> compute.compute_now() ORDER BY c.node_id) AS x;
    ELSE
        PERFORM compute.node_spec_refresh(x.node_id)
           FROM (SELECT DISTINCT c.node_id FROM changed_bookings AS c JOIN previous_bookings AS p USING (booking_id)
                  WHERE (c.state = 'active' AND c.during @> compute.compute_now()
                         OR p.state = 'active' AND p.during @> compute.compute_now())
                    AND (c.state, c.during) IS DISTINCT FROM (p.state, p.during)
                  ORDER BY c.node_id) AS x;
    END IF;
    RETURN NULL;
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
                      JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> v_now
                       AND r.instance_kind <> 'vps'
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
             WHERE d.node_id = p_node_id AND d.present
               AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
                                WHERE b.device_id = d.device_id AND b.state = 'active' AND b.during @> v_now AND r.instance_kind = 'vps')),
        'withdrawal', pg_catalog.jsonb_build_object('grace_seconds', compute.limit('withdrawal_grace_seconds')))
        -- The VMs it must run (sql/700_instances.sql), only when there are any; their GPUs are passed
        -- through, never in "devices" (hence never in the CDI file, nor granted) nor in "gpus" (no
        -- MIG convergence touches a GPU a VM holds).
        || (SELECT CASE WHEN v.instances <> '[]' THEN pg_catalog.jsonb_build_object('instances', v.instances) ELSE '{}' END
              FROM (SELECT compute.node_spec_instances(p_node_id) AS instances) AS v);
END
$function$;

CREATE OR REPLACE FUNCTION compute.node_spec_instances(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    -- Instances whose booking holds now and that did not fail: what the node must run (or keep stopped).
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'instance_id', i.instance_id, 'domain', 'bc-' || i.instance_id, 'generation', i.generation,
               'power', CASE WHEN i.state = 'stopped' THEN 'stopped' ELSE 'running' END, 'reboots', i.reboots,
               'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib, 'disk_gib', i.disk_gib,
               'ssh_keys', pg_catalog.to_jsonb(i.ssh_keys), 'gpus', compute.instance_gpus(i.reservation_id))
               ORDER BY i.instance_id), '[]')
      FROM compute.instances AS i
     WHERE i.node_id = p_node_id AND i.state IN ('provisioning', 'running', 'stopped')
       AND EXISTS (SELECT 1 FROM compute.bookings AS b
                    WHERE b.reservation_id = i.reservation_id AND b.state = 'active' AND b.during @> compute.compute_now());
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

CREATE OR REPLACE FUNCTION compute.place_choose(p_candidates compute.placement_candidate[], p_count integer, p_during tstzrange, p_pack boolean, p_same_node boolean)
 RETURNS uuid[]
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN (WITH c AS (
        SELECT x.*,
               CASE WHEN p_count > 1   -- NVLink peers matter only to multi-atom requests
                    THEN (SELECT count(*) FROM pg_catalog.unnest(p_candidates) AS y
                           WHERE y.node_id = x.node_id AND y.device_id <> x.device_id AND y.device_uuid = ANY (x.nvlink_peers))
                    ELSE 0 END AS peer_score
          FROM pg_catalog.unnest(p_candidates) AS x
    ), nodes AS (
        SELECT c.node_id, count(*) AS free, min(c.node_rank) AS rank,
               (SELECT count(*) FROM compute.bookings AS b
                 WHERE b.node_id = c.node_id AND b.during && p_during AND b.state IN ('provisional', 'active')) AS used
          FROM c GROUP BY c.node_id
    ), ordered_nodes AS (
        SELECT n.node_id, n.free,
               row_number() OVER (ORDER BY n.free >= p_count DESC,                      -- one node that fits, if any
                                           CASE WHEN n.free >= p_count THEN 0 ELSE -n.free END,  -- else fewest nodes
                                           CASE WHEN p_pack THEN -n.used ELSE n.used END,        -- pack or spread
                                           n.rank) AS node_order
          FROM nodes AS n
    ), picked AS (
        SELECT c.atom_id, o.node_order, o.free,
               row_number() OVER (ORDER BY o.node_order, c.peer_score DESC, c.device_index, c.slice0, c.slot) AS k
          FROM c JOIN ordered_nodes AS o USING (node_id)
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM picked WHERE k <= p_count) < p_count THEN NULL
        WHEN p_same_node AND (SELECT max(node_order) FROM picked WHERE k <= p_count) > 1 THEN NULL
        ELSE (SELECT pg_catalog.array_agg(atom_id ORDER BY k) FROM picked WHERE k <= p_count)
    END);
END
$function$;

CREATE OR REPLACE FUNCTION compute.quota_check(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_during tstzrange, p_atoms integer, p_gpu_fraction numeric, p_excluding uuid DEFAULT NULL::uuid)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
-- Lock order: quota rows FOR UPDATE in quota_id order (before any device lock).
DECLARE
    v_quota compute.quotas;
    v_scope text;
    v_peak  bigint;
    v_month timestamptz;
    v_used  numeric;
    v_asked numeric;
BEGIN
    FOR v_quota IN
        SELECT * FROM compute.quotas AS q
         WHERE q.tenant_id = p_tenant_id AND q.pool_id = p_pool_id
           AND (q.project_id IS NULL OR q.project_id = p_project_id)
         ORDER BY q.quota_id
           FOR UPDATE
    LOOP
        v_scope := CASE WHEN v_quota.project_id IS NULL THEN 'tenant' ELSE 'project' END;

        -- Concurrent atoms: the peak is reached at the window's start or at a booking's start within it.
        IF v_quota.max_atoms IS NOT NULL THEN
            SELECT coalesce(max(held), 0) INTO v_peak
              FROM (SELECT t, (SELECT count(*) FROM compute.bookings AS b
                                WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                                  AND b.state IN ('provisional', 'active') AND upper(b.during) > t AND lower(b.during) <= t
                                  AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                                  AND b.reservation_id IS DISTINCT FROM p_excluding) AS held
                      FROM (SELECT lower(p_during) AS t
                            UNION
                            SELECT lower(b.during) FROM compute.bookings AS b
                             WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                               AND b.state IN ('provisional', 'active') AND upper(b.during) > lower(p_during)
                               AND lower(b.during) >= lower(p_during) AND lower(b.during) < upper(p_during)) AS instants) AS counts;
            IF v_peak + p_atoms > v_quota.max_atoms THEN
                PERFORM compute.raise_error('QUOTA_EXCEEDED',
                    pg_catalog.format('%s quota of %s concurrent atoms in this pool would be exceeded', v_scope, v_quota.max_atoms),
                    pg_catalog.format('%s atoms remain during the window (%s held at the peak, %s asked); release some or ask for fewer.',
                                      greatest(v_quota.max_atoms - v_peak, 0), v_peak, p_atoms));
            END IF;
        END IF;

        -- GPU-hours per calendar month, for each month the window touches.
        IF v_quota.gpu_hours_per_month IS NOT NULL THEN
            FOR v_month IN
                SELECT m AT TIME ZONE 'UTC'
                  FROM pg_catalog.generate_series(date_trunc('month', lower(p_during) AT TIME ZONE 'UTC'),
                                                  date_trunc('month', upper(p_during) AT TIME ZONE 'UTC'), interval '1 month') AS m
            LOOP
                v_asked := p_gpu_fraction * compute.month_hours(p_during, v_month);
                CONTINUE WHEN v_asked = 0;
                SELECT coalesce(sum(b.gpu_fraction * compute.month_hours(b.during, v_month)), 0) INTO v_used
                  FROM compute.bookings AS b
                 WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                   AND b.state IN ('provisional', 'active', 'released')
                   AND upper(b.during) > v_month AND lower(b.during) < (v_month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'
                   AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                   AND b.reservation_id IS DISTINCT FROM p_excluding;
                IF v_used + v_asked > v_quota.gpu_hours_per_month THEN
                    PERFORM compute.raise_error('QUOTA_EXCEEDED',
                        pg_catalog.format('%s quota of %s GPU-hours in %s would be exceeded', v_scope,
                                          v_quota.gpu_hours_per_month, pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM')),
                        pg_catalog.format('%s GPU-hours remain in %s (%s used or booked, %s asked); shorten the window or ask for less.',
                                          round(greatest(v_quota.gpu_hours_per_month - v_used, 0), 3),
                                          pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM'), round(v_used, 3), round(v_asked, 3)));
                END IF;
            END LOOP;
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_activate(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
    UPDATE compute.bookings SET state = 'active' WHERE reservation_id = p_reservation_id;
    UPDATE compute.reservations SET state = 'active', expires_at = NULL, activated_at = compute.compute_now()
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
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

CREATE OR REPLACE FUNCTION compute.usage_compute()
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- Lock order: reservation rows FOR UPDATE SKIP LOCKED (a reservation changing right now waits for the next run).
DECLARE
    v_now         timestamptz := compute.compute_now();
    v_closed      timestamptz := pg_catalog.date_trunc('hour', compute.compute_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    v_reservation compute.reservations;
    v_from        timestamptz;
    v_until       timestamptz;
    v_windows     integer := 0;
    v_count       integer;
BEGIN
    FOR v_reservation IN
        SELECT r.* FROM compute.reservations AS r
          LEFT JOIN compute.usage_progress AS p ON p.reservation_id = r.reservation_id
         WHERE r.state IN ('active', 'released', 'expired') AND lower(r.during) < v_closed
           AND coalesce(p.computed_until, '-infinity') < least(upper(r.during), v_closed)
           -- A lapsed lease is about to be ended at hold_until by the expiry sweep, which may lie in
           -- a closed hour: wait for the sweep (or a renewal) rather than bill time it takes back.
           AND NOT coalesce(r.state = 'active' AND r.hold_until <= v_now AND upper(r.during) > r.hold_until, false)
         ORDER BY r.reservation_id
         LIMIT compute.limit('usage_export_batch')
           FOR UPDATE OF r SKIP LOCKED
    LOOP
        SELECT coalesce(p.computed_until, pg_catalog.date_trunc('hour', lower(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
          INTO v_from FROM (SELECT NULL) AS x
          LEFT JOIN compute.usage_progress AS p ON p.reservation_id = v_reservation.reservation_id;
        v_until := least(v_closed, pg_catalog.date_trunc('hour', upper(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                   + CASE WHEN upper(v_reservation.during) = pg_catalog.date_trunc('hour', upper(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                          THEN interval '0' ELSE interval '1 hour' END);
        INSERT INTO compute.usage_windows (reservation_id, window_start, tenant_id, project_id, pool_id, shape, atom_seconds,
                                           gpu_seconds, ledger_key, computed_at)
        SELECT v_reservation.reservation_id, h, v_reservation.tenant_id, v_reservation.project_id, v_reservation.pool_id,
               v_reservation.shape, sum(extract(epoch FROM upper(o) - lower(o))), sum(b.gpu_fraction * extract(epoch FROM upper(o) - lower(o))),
               pg_catalog.format('usage:%s:%s', v_reservation.reservation_id, pg_catalog.to_char(h AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:00:00"Z"')),
               v_now
          FROM pg_catalog.generate_series(v_from, v_until - interval '1 hour', interval '1 hour') AS h
          JOIN compute.bookings AS b ON b.reservation_id = v_reservation.reservation_id AND b.state IN ('active', 'released')
         CROSS JOIN LATERAL (SELECT b.during * tstzrange(h, h + interval '1 hour') AS o) AS overlap
         WHERE NOT isempty(o)
         GROUP BY h
        ON CONFLICT (reservation_id, window_start) DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_windows := v_windows + v_count;
        INSERT INTO compute.usage_progress (reservation_id, computed_until) VALUES (v_reservation.reservation_id, v_until)
        ON CONFLICT (reservation_id) DO UPDATE SET computed_until = EXCLUDED.computed_until;
    END LOOP;
    RETURN v_windows;
END
$function$;

CREATE OR REPLACE VIEW ops.atom_holders AS
 WITH now_ AS (
         SELECT ops.now() AS t
        )
 SELECT p.name AS pool,
    n.name AS node,
    d.uuid AS device_uuid,
    d.index AS device_index,
    a.atom_id,
    a.shape,
    a.placement,
    a.slot,
    d.layout,
    cur.reservation_id AS holder_reservation,
    cur.tenant_id AS holder_tenant,
    upper(cur.during) AS held_until,
    nxt.reservation_id AS next_reservation,
    nxt.tenant_id AS next_tenant,
    lower(nxt.during) AS next_from
   FROM now_,
    compute.atoms a
     JOIN compute.devices d ON d.device_id = a.device_id
     JOIN compute.nodes n ON n.node_id = a.node_id
     JOIN compute.pools p ON p.pool_id = a.pool_id
     LEFT JOIN LATERAL ( SELECT b.reservation_id,
            b.tenant_id,
            b.during
           FROM compute.bookings b
          WHERE b.device_id = a.device_id AND b.slices && a.slices AND b.shares && a.shares AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND b.during @> now_.t
         LIMIT 1) cur ON true
     LEFT JOIN LATERAL ( SELECT b.reservation_id,
            b.tenant_id,
            b.during
           FROM compute.bookings b
          WHERE b.atom_id = a.atom_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND lower(b.during) > now_.t
          ORDER BY (lower(b.during))
         LIMIT 1) nxt ON true
  WHERE a.valid @> now_.t;

CREATE OR REPLACE VIEW ops.instances AS
 SELECT i.instance_id,
    'bc-'::text || i.instance_id AS domain,
    i.tenant_id,
    i.project_id,
    p.name AS pool,
    n.name AS node,
    i.state,
    i.image,
    i.vcpus,
    i.memory_mib,
    i.disk_gib,
    ( SELECT array_agg(d.pci_bus_id ORDER BY d.pci_bus_id) AS array_agg
           FROM compute.bookings b
             JOIN compute.devices d ON d.device_id = b.device_id
          WHERE b.reservation_id = i.reservation_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text]))) AS gpus_pci,
    i.reservation_id,
    upper(r.during) AS booked_until,
    i.generation,
    i.observed_generation,
    NOT i.observed_generation IS DISTINCT FROM i.generation AS converged,
    i.conditions,
    i.failure,
    i.created_at,
    i.changed_at
   FROM compute.instances i
     JOIN compute.nodes n ON n.node_id = i.node_id
     JOIN compute.pools p ON p.pool_id = i.pool_id
     JOIN compute.reservations r ON r.reservation_id = i.reservation_id;

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

CREATE OR REPLACE VIEW ops.pool_capacity AS
 WITH now_ AS (
         SELECT ops.now() AS t
        )
 SELECT p.pool_id,
    p.name AS pool,
    p.gpu_model,
    a.shape,
    count(*) AS total,
    count(*) FILTER (WHERE d.present AND NOT (EXISTS ( SELECT 1
           FROM compute.node_flags f
          WHERE f.node_id = a.node_id))) AS bookable,
    count(*) FILTER (WHERE (EXISTS ( SELECT 1
           FROM compute.bookings b
          WHERE b.atom_id = a.atom_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND b.during @> now_.t))) AS held_now,
    count(*) FILTER (WHERE (EXISTS ( SELECT 1
           FROM compute.bookings b
          WHERE b.atom_id = a.atom_id AND (b.state = ANY (ARRAY['provisional'::text, 'active'::text])) AND lower(b.during) > now_.t))) AS held_future,
    count(*) FILTER (WHERE (EXISTS ( SELECT 1
           FROM compute.node_flags f
          WHERE f.node_id = a.node_id))) AS cordoned
   FROM now_,
    compute.atoms a
     JOIN compute.pools p ON p.pool_id = a.pool_id
     JOIN compute.devices d ON d.device_id = a.device_id
  WHERE a.valid @> now_.t
  GROUP BY p.pool_id, p.name, p.gpu_model, a.shape;

CREATE OR REPLACE VIEW ops.readiness AS
 SELECT b.booking_id,
    b.reservation_id,
    b.tenant_id,
    n.name AS node,
    b.node_id,
    d.uuid AS device_uuid,
    a.kind,
    a.profile,
    a.placement,
    a.slot,
    x.r ->> 'state'::text AS state,
    x.r ->> 'reason'::text AS reason,
    g.granted_generation,
    s.observed_generation
   FROM compute.bookings b
     JOIN compute.atoms a ON a.atom_id = b.atom_id
     JOIN compute.devices d ON d.device_id = b.device_id
     JOIN compute.nodes n ON n.node_id = b.node_id
     LEFT JOIN compute.node_grants g ON g.booking_id = b.booking_id
     LEFT JOIN compute.node_specs s ON s.node_id = b.node_id
     CROSS JOIN LATERAL ( SELECT ops.booking_readiness(b.booking_id) AS r) x
  WHERE b.state = 'active'::text AND b.during @> ops.now();

DROP FUNCTION compute.node_spec_reservation_changed();

COMMIT;
