-- Desired state of a node (docs/architecture.md §8, P2): node_specs holds the spec document (per device, the
-- reservation holding it now and the CDI names to expose) and its generation. The generation is
-- bumped by triggers when what the node should look like changes: a booking of the node becomes
-- or stops being active now, a device's layout changes, the node's inventory (its MIG instances)
-- changes; a periodic tick catches bookings that start or end by time passing. The daemon
-- converges level-triggered and reports observed_generation and conditions.
--
-- Intent going down is signed by the control plane, not by the gateway (P14): a refresh that
-- changes the spec pokes work 'node.spec.sign'; the worker signs the document with its Ed25519
-- intent key and stores the envelope; gateways relay only signed envelopes.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.node_specs (
    node_id             uuid CONSTRAINT node_specs_pkey PRIMARY KEY CONSTRAINT node_specs_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    generation          bigint NOT NULL CONSTRAINT node_specs_generation_check CHECK (generation > 0),
    spec                jsonb NOT NULL,
    changed_at          timestamptz NOT NULL,
    envelope            jsonb,
    signed_generation   bigint,
    observed_generation bigint,
    observed_at         timestamptz,
    conditions          jsonb NOT NULL DEFAULT '[]' CONSTRAINT node_specs_conditions_check CHECK (jsonb_typeof(conditions) = 'array'),
    CONSTRAINT node_specs_signed_at_most_generation CHECK (signed_generation <= generation),
    CONSTRAINT node_specs_observed_at_most_generation CHECK (observed_generation <= generation)
);
COMMENT ON TABLE compute.node_specs IS 'Desired state per node (spec + generation), its signed envelope, and what the node last reported.';

CREATE FUNCTION compute.node_spec_document(p_node_id uuid)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
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
                      FROM compute.active_bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                     WHERE b.node_id = p_node_id AND b.during @> v_now
                       AND b.instance_kind <> 'vps'
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
               AND NOT EXISTS (SELECT 1 FROM compute.active_bookings AS b
                                WHERE b.device_id = d.device_id AND b.during @> v_now AND b.instance_kind = 'vps')),
        'withdrawal', pg_catalog.jsonb_build_object('grace_seconds', compute.limit('withdrawal_grace_seconds')))
        -- The VMs it must run (sql/700_instances.sql), only when there are any; their GPUs are passed
        -- through, never in "devices" (hence never in the CDI file, nor granted) nor in "gpus" (no
        -- MIG convergence touches a GPU a VM holds).
        || (SELECT CASE WHEN v.instances <> '[]' THEN pg_catalog.jsonb_build_object('instances', v.instances) ELSE '{}' END
              FROM (SELECT compute.node_spec_instances(p_node_id) AS instances) AS v);
END
$$;
COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation (by booking), the withdrawal policy, each GPU''s layout (MIG mode and instances) but those a VM holds, and the VMs it must run.';

CREATE FUNCTION compute.node_spec_refresh(p_node_id uuid)
RETURNS bigint
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.node_spec_refresh(uuid) IS 'Recompute a node''s spec; bump its generation when it changed and have the worker sign it.';

-- -- triggers ---------------------------------------------------------------------------------------

CREATE FUNCTION compute.node_spec_bookings_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- Only bookings active now change what a node exposes now (future ones: the tick, when they
    -- start). A booking is written held for a provisional reservation, so an insert never changes
    -- a spec (activation does: compute.node_spec_reservation_changed); an update does where the
    -- booking held now for an active reservation (in the statement's view: release and extend
    -- change bookings before their reservation). One refresh per node, in node order (the same
    -- lock order in every transaction).
    PERFORM compute.node_spec_refresh(x.node_id)
       FROM (SELECT DISTINCT c.node_id FROM changed_bookings AS c JOIN previous_bookings AS p USING (booking_id)
               JOIN compute.reservations AS r ON r.reservation_id = c.reservation_id
              WHERE r.state = 'active'
                AND (c.state = 'held' AND c.during @> compute.compute_now() OR p.state = 'held' AND p.during @> compute.compute_now())
                AND (c.state, c.during) IS DISTINCT FROM (p.state, p.during)
              ORDER BY c.node_id) AS x;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.node_spec_bookings_changed() IS 'Refresh the specs of nodes whose bookings active now changed.';

CREATE FUNCTION compute.node_spec_reservation_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- A reservation became active: the nodes its bookings hold now (one refresh per node, in node
    -- order). Leaving active is seen by compute.node_spec_bookings_changed: compute.reservation_end
    -- updates the bookings first, while the reservation is still active.
    PERFORM compute.node_spec_refresh(x.node_id)
       FROM (SELECT DISTINCT b.node_id FROM compute.bookings AS b
              WHERE b.reservation_id = NEW.reservation_id AND b.during @> compute.compute_now()
              ORDER BY b.node_id) AS x;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.node_spec_reservation_changed() IS 'Refresh the specs of the nodes a reservation holds now when it becomes active.';
CREATE TRIGGER reservations_node_spec AFTER UPDATE OF state ON compute.reservations
    FOR EACH ROW WHEN (NEW.state = 'active' AND OLD.state <> 'active')
    EXECUTE FUNCTION compute.node_spec_reservation_changed();
CREATE TRIGGER bookings_node_spec_update AFTER UPDATE ON compute.bookings
    REFERENCING OLD TABLE AS previous_bookings NEW TABLE AS changed_bookings
    FOR EACH STATEMENT EXECUTE FUNCTION compute.node_spec_bookings_changed();

CREATE FUNCTION compute.node_spec_node_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- A device's layout or the node's inventory (its MIG instances, hence CDI names) changed.
    PERFORM compute.node_spec_refresh(NEW.node_id);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.node_spec_node_changed() IS 'Refresh a node''s spec when a layout or its inventory changed.';
CREATE TRIGGER devices_node_spec AFTER UPDATE OF layout ON compute.devices
    FOR EACH ROW EXECUTE FUNCTION compute.node_spec_node_changed();
CREATE TRIGGER nodes_node_spec AFTER INSERT OR UPDATE OF inventory ON compute.nodes
    FOR EACH ROW EXECUTE FUNCTION compute.node_spec_node_changed();

-- -- the tick and the reconciler --------------------------------------------------------------------

CREATE FUNCTION compute.node_specs_tick()
RETURNS integer
LANGUAGE plpgsql
AS $$
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
            SELECT b.node_id FROM compute.active_bookings AS b
             WHERE (lower(b.during) <@ tstzrange(v_now - compute.limit('node_spec_tick_window_seconds') * interval '1 second', v_now, '(]')
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
$$;
COMMENT ON FUNCTION compute.node_specs_tick() IS 'Sweep: refresh the specs of nodes whose bookings started or ended, or whose GPUs changed layout, by time passing.';

CREATE FUNCTION compute.node_specs_lagging()
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    -- The reconciler (level-triggered): signed specs that connected nodes have not confirmed
    -- within node_spec_resend_seconds are poked to their gateways again.
    SELECT count(pg_catalog.pg_notify('bc_node_spec', s.node_id::text)) INTO v_count
      FROM compute.node_specs AS s JOIN compute.node_sessions AS n ON n.node_id = s.node_id
     WHERE n.closed_at IS NULL AND s.signed_generation IS NOT NULL
       AND s.observed_generation IS DISTINCT FROM s.signed_generation
       AND s.changed_at < compute.compute_now() - compute.limit('node_spec_resend_seconds') * interval '1 second';
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION compute.node_specs_lagging() IS 'Reconciler: poke gateways again for connected nodes whose observed generation lags.';

-- -- signing (worker) and the node side (gateway) ---------------------------------------------------

CREATE FUNCTION worker_api.node_spec_to_sign(p_node_id uuid)
RETURNS TABLE (generation bigint, spec jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT s.generation, s.spec FROM compute.node_specs AS s
     WHERE s.node_id = p_node_id AND s.signed_generation IS DISTINCT FROM s.generation
$$;
COMMENT ON FUNCTION worker_api.node_spec_to_sign(uuid) IS 'The spec the worker must sign (none when the newest is signed).';

CREATE FUNCTION worker_api.node_spec_signed(p_node_id uuid, p_generation bigint, p_envelope jsonb)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    -- Only the newest generation is stored: a signature of an older one (a slow worker) is dropped.
    UPDATE compute.node_specs SET envelope = p_envelope, signed_generation = p_generation
     WHERE node_id = p_node_id AND generation = p_generation;
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify('bc_node_spec', p_node_id::text);
    END IF;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION worker_api.node_spec_signed(uuid, bigint, jsonb) IS 'Store a signed spec envelope (the newest generation only) and poke gateways.';

CREATE FUNCTION node_api.spec_get(p_node_id uuid, p_epoch bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    RETURN (SELECT pg_catalog.jsonb_build_object('generation', s.signed_generation, 'envelope', s.envelope)
              FROM compute.node_specs AS s WHERE s.node_id = p_node_id AND s.envelope IS NOT NULL);
END
$$;
COMMENT ON FUNCTION node_api.spec_get(uuid, bigint) IS 'The node''s newest signed spec envelope (under its current session).';
