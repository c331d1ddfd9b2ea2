-- What operators see and do at psql (role bc_operator, schema ops): the fleet, capacity per pool,
-- who holds each atom now and who is next; node flags; the capacity queries. The views are owned by
-- bc_owner, so they read compute for the operator; but a view calls functions with its reader's
-- privileges, so they read the clock through ops.now(). The functions are SECURITY DEFINER and
-- record session_user (the operator's login) as who set a flag.
SET LOCAL ROLE bc_owner;

CREATE VIEW ops.nodes AS
    SELECT n.node_id, n.name, s.name AS site, p.name AS pool, p.gpu_model,
           (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id AND d.present) AS gpus,
           (SELECT pg_catalog.array_agg(f.flag ORDER BY f.flag) FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flags,
           CASE WHEN NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id AND f.flag = 'draining') THEN NULL
                WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                              WHERE b.node_id = n.node_id AND b.state = 'held'
                                AND b.during @> ops.now()) THEN 'draining'
                ELSE 'drained' END AS drain,
           (SELECT pg_catalog.jsonb_object_agg(f.flag, pg_catalog.jsonb_build_object('by', f.set_by, 'reason', f.reason, 'at', f.set_at,
                                                                                    'completed_at', f.completed_at))
              FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flag_details,
           n.inventory_at, n.created_at,
           coalesce(ns.closed_at IS NULL
                    AND ns.last_heard_at > ops.now() - (SELECT l.value FROM compute.limits AS l WHERE l.name = 'session_timeout_seconds')
                                                       * interval '1 second', false) AS connected,
           round(extract(epoch FROM ops.now() - ns.last_heard_at)::numeric, 1) AS last_heard_seconds,
           (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('gpu_uuid', d.uuid, 'index', d.index, 'type', c.type,
                                                                      'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                                      'message', c.message, 'by', c.set_by, 'since', c.since,
                                                                      'reported_at', c.reported_at, 'generation', c.generation)
                                        ORDER BY d.index, c.type)
              FROM compute.device_conditions AS c JOIN compute.devices AS d ON d.device_id = c.device_id
             WHERE d.node_id = n.node_id) AS gpu_conditions,
           (SELECT count(DISTINCT c.device_id) FROM compute.device_conditions AS c JOIN compute.devices AS d ON d.device_id = c.device_id
             WHERE d.node_id = n.node_id AND c.critical) AS gpus_unschedulable
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id
      LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id;
COMMENT ON VIEW ops.nodes IS 'Every node: pool, GPUs present, flags (who, why, when), drain state (draining until no booking is live now), connected and the age since last heard, its GPUs'' conditions (who, why, since when) and how many GPUs a critical one keeps out of placement.';
COMMENT ON COLUMN ops.nodes.node_id IS 'The node''s id (what ops.node_* functions accept besides site/name).';
COMMENT ON COLUMN ops.nodes.name IS 'The node''s name, unique within its site only: two sites may each have a node-1.';
COMMENT ON COLUMN ops.nodes.site IS 'The site''s name.';
COMMENT ON COLUMN ops.nodes.pool IS 'The pool''s name.';
COMMENT ON COLUMN ops.nodes.gpu_model IS 'The pool''s one GPU model.';
COMMENT ON COLUMN ops.nodes.gpus IS 'GPUs present in the last inventory.';
COMMENT ON COLUMN ops.nodes.flags IS 'Flags set on the node: cordoned, draining, quarantined (none: NULL).';
COMMENT ON COLUMN ops.nodes.drain IS 'draining while a booking is live now on a draining node, then drained; NULL when not draining.';
COMMENT ON COLUMN ops.nodes.flag_details IS 'Per flag: who set it (by), why (reason), when (at) and when a drain completed.';
COMMENT ON COLUMN ops.nodes.inventory_at IS 'When the node last reported its inventory.';
COMMENT ON COLUMN ops.nodes.created_at IS 'When the node registered.';
COMMENT ON COLUMN ops.nodes.connected IS 'Whether a gateway session is open and heard within session_timeout_seconds (disconnected is not dead: nothing is released).';
COMMENT ON COLUMN ops.nodes.last_heard_seconds IS 'Seconds since the gateway last heard the node (NULL: never).';
COMMENT ON COLUMN ops.nodes.gpu_conditions IS 'Each GPU condition: gpu_uuid, index, type, status, critical, reason, message, who set it, since, reported_at.';
COMMENT ON COLUMN ops.nodes.gpus_unschedulable IS 'GPUs that a critical condition keeps out of placement.';

CREATE VIEW ops.pool_capacity AS
    WITH now_ AS (SELECT ops.now() AS t)
    SELECT p.pool_id, p.name AS pool, p.gpu_model, a.shape,
           count(*) AS total,
           count(*) FILTER (WHERE d.present AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)) AS bookable,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.bookings AS b
                                          WHERE b.atom_id = a.atom_id AND b.state = 'held' AND b.during @> now_.t)) AS held_now,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.bookings AS b
                                          WHERE b.atom_id = a.atom_id AND b.state = 'held' AND lower(b.during) > now_.t)) AS held_future,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)) AS cordoned
      FROM now_, compute.atoms AS a
      JOIN compute.pools AS p ON p.pool_id = a.pool_id
      JOIN compute.devices AS d ON d.device_id = a.device_id
     WHERE a.valid @> now_.t
     GROUP BY p.pool_id, p.name, p.gpu_model, a.shape;
COMMENT ON VIEW ops.pool_capacity IS 'Atoms valid now per pool and shape: total, bookable, held now, held in future, on flagged (cordoned, draining, quarantined) nodes.';
COMMENT ON COLUMN ops.pool_capacity.pool_id IS 'The pool''s id.';
COMMENT ON COLUMN ops.pool_capacity.pool IS 'The pool''s name.';
COMMENT ON COLUMN ops.pool_capacity.gpu_model IS 'The pool''s GPU model.';
COMMENT ON COLUMN ops.pool_capacity.shape IS 'The atom shape: gpu, slot or mig:<profile>.';
COMMENT ON COLUMN ops.pool_capacity.total IS 'Atoms of the shape valid now.';
COMMENT ON COLUMN ops.pool_capacity.bookable IS 'Atoms on a present GPU of an unflagged node.';
COMMENT ON COLUMN ops.pool_capacity.held_now IS 'Atoms a live booking holds now.';
COMMENT ON COLUMN ops.pool_capacity.held_future IS 'Atoms with a booking that starts later.';
COMMENT ON COLUMN ops.pool_capacity.cordoned IS 'Atoms on flagged (cordoned, draining, quarantined) nodes.';

CREATE VIEW ops.atom_holders AS
    WITH now_ AS (SELECT ops.now() AS t)
    SELECT p.name AS pool, n.name AS node, d.uuid AS device_uuid, d.index AS device_index, a.atom_id, a.shape,
           a.placement, a.slot, d.layout,
           cur.reservation_id AS holder_reservation, cur.tenant_id AS holder_tenant, upper(cur.during) AS held_until,
           nxt.reservation_id AS next_reservation, nxt.tenant_id AS next_tenant, lower(nxt.during) AS next_from
      FROM now_, compute.atoms AS a
      JOIN compute.devices AS d ON d.device_id = a.device_id
      JOIN compute.nodes AS n ON n.node_id = a.node_id
      JOIN compute.pools AS p ON p.pool_id = a.pool_id
      LEFT JOIN LATERAL (SELECT b.reservation_id, b.tenant_id, b.during FROM compute.bookings AS b
                          WHERE b.device_id = a.device_id AND b.slices && a.slices AND b.shares && a.shares
                            AND b.state = 'held' AND b.during @> now_.t
                          LIMIT 1) AS cur ON true
      LEFT JOIN LATERAL (SELECT b.reservation_id, b.tenant_id, b.during FROM compute.bookings AS b
                          WHERE b.atom_id = a.atom_id AND b.state = 'held' AND lower(b.during) > now_.t
                          ORDER BY lower(b.during) LIMIT 1) AS nxt ON true
     WHERE a.valid @> now_.t;
COMMENT ON VIEW ops.atom_holders IS 'Who holds each atom (or an overlapping part of its GPU) now, until when, and who holds it next.';
COMMENT ON COLUMN ops.atom_holders.pool IS 'The pool''s name.';
COMMENT ON COLUMN ops.atom_holders.node IS 'The node''s name.';
COMMENT ON COLUMN ops.atom_holders.device_uuid IS 'The GPU''s uuid (GPU-…).';
COMMENT ON COLUMN ops.atom_holders.device_index IS 'The GPU''s index on its node.';
COMMENT ON COLUMN ops.atom_holders.atom_id IS 'The atom: what a booking holds.';
COMMENT ON COLUMN ops.atom_holders.shape IS 'gpu, slot or mig:<profile>.';
COMMENT ON COLUMN ops.atom_holders.placement IS 'A MIG instance''s start slice (NULL otherwise).';
COMMENT ON COLUMN ops.atom_holders.slot IS 'A time-slice slot''s number (NULL otherwise).';
COMMENT ON COLUMN ops.atom_holders.layout IS 'The GPU''s current layout.';
COMMENT ON COLUMN ops.atom_holders.holder_reservation IS 'The reservation holding the atom, or an overlapping part of its GPU, now.';
COMMENT ON COLUMN ops.atom_holders.holder_tenant IS 'Its tenant.';
COMMENT ON COLUMN ops.atom_holders.held_until IS 'When that booking ends.';
COMMENT ON COLUMN ops.atom_holders.next_reservation IS 'The next reservation to hold the atom.';
COMMENT ON COLUMN ops.atom_holders.next_tenant IS 'Its tenant.';
COMMENT ON COLUMN ops.atom_holders.next_from IS 'When it starts.';

CREATE VIEW ops.devices AS
    WITH now_ AS (SELECT ops.now() AS t)
    SELECT d.uuid AS device_uuid, s.name AS site, p.name AS pool, n.name AS node, d.index, d.model, d.memory_mib, d.layout,
           d.layout_since, d.present,
           (SELECT count(*) FROM compute.atoms AS a WHERE a.device_id = d.device_id AND a.valid @> now_.t) AS atoms,
           (SELECT count(*) FROM compute.atoms AS a
             WHERE a.device_id = d.device_id AND a.valid @> now_.t
               AND EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.atom_id = a.atom_id AND b.state = 'held'
                                                                AND b.during @> now_.t)) AS atoms_held_now,
           (SELECT pg_catalog.array_agg(c.type ORDER BY c.type) FROM compute.device_conditions AS c
             WHERE c.device_id = d.device_id AND c.critical) AS critical_conditions,
           d.pci_bus_id, d.numa_node, d.nvlink_peers, d.mig_supported, d.device_id, d.node_id, n.pool_id, d.site_id
      FROM now_, compute.devices AS d
      JOIN compute.nodes AS n ON n.node_id = d.node_id
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = d.site_id;
COMMENT ON VIEW ops.devices IS 'Every GPU: where it is (site, pool, node, index), what it is, its layout, whether it is present, its atoms valid now and how many are held, and the critical conditions that keep it out of placement.';
COMMENT ON COLUMN ops.devices.device_uuid IS 'The GPU''s uuid (GPU-…): what ops.device_set_layout takes.';
COMMENT ON COLUMN ops.devices.site IS 'The site''s name.';
COMMENT ON COLUMN ops.devices.pool IS 'The pool''s name.';
COMMENT ON COLUMN ops.devices.node IS 'The node''s name.';
COMMENT ON COLUMN ops.devices.index IS 'The GPU''s index on its node (nvidia-smi''s).';
COMMENT ON COLUMN ops.devices.model IS 'The GPU model.';
COMMENT ON COLUMN ops.devices.memory_mib IS 'GPU memory in MiB.';
COMMENT ON COLUMN ops.devices.layout IS 'whole, timeslice:N or mig:profile@placement,…';
COMMENT ON COLUMN ops.devices.layout_since IS 'Since when that layout holds.';
COMMENT ON COLUMN ops.devices.present IS 'Whether the last inventory reported the GPU (absent: a condition, bookings are kept).';
COMMENT ON COLUMN ops.devices.atoms IS 'Bookable units of the GPU valid now.';
COMMENT ON COLUMN ops.devices.atoms_held_now IS 'Of those, how many a live booking holds now.';
COMMENT ON COLUMN ops.devices.critical_conditions IS 'Types of critical conditions that keep the GPU out of placement (NULL: none).';
COMMENT ON COLUMN ops.devices.pci_bus_id IS 'The PCI bus id.';
COMMENT ON COLUMN ops.devices.numa_node IS 'The NUMA node (NULL: unknown).';
COMMENT ON COLUMN ops.devices.nvlink_peers IS 'Uuids of the GPUs it has NVLink to.';
COMMENT ON COLUMN ops.devices.mig_supported IS 'Whether it can be partitioned with MIG.';
COMMENT ON COLUMN ops.devices.device_id IS 'The GPU''s id in the database.';
COMMENT ON COLUMN ops.devices.node_id IS 'Its node''s id.';
COMMENT ON COLUMN ops.devices.pool_id IS 'Its pool''s id.';
COMMENT ON COLUMN ops.devices.site_id IS 'Its site''s id.';

CREATE FUNCTION ops.node_id(p_node text)
RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = ''
AS $$
DECLARE
    v_node_ids uuid[];
    v_names    text[];
BEGIN
    -- A node by its id, its site/name, or its bare name. Names are unique per site only (two tenants
    -- may each have a node-1): a bare name that several nodes share is refused, naming each one, so
    -- that an operator never flags, fences or drains another tenant's node by accident.
    SELECT pg_catalog.array_agg(n.node_id ORDER BY s.name, n.node_id), pg_catalog.array_agg(s.name || '/' || n.name ORDER BY s.name, n.node_id)
      INTO v_node_ids, v_names
      FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
     WHERE n.node_id::text = p_node OR n.name = p_node OR s.name || '/' || n.name = p_node;
    IF v_node_ids IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %L', p_node),
            'Name a node by its id, site/name or name (see ops.nodes).');
    END IF;
    IF pg_catalog.cardinality(v_node_ids) > 1 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('node name %L is ambiguous: %s nodes have it (%s)', p_node, pg_catalog.cardinality(v_node_ids),
                              pg_catalog.array_to_string(v_names, ', ')),
            pg_catalog.format('Name the node as site/name (%s) or by its id (see ops.nodes).', pg_catalog.array_to_string(v_names, ', ')));
    END IF;
    RETURN v_node_ids[1];
END
$$;
COMMENT ON FUNCTION ops.node_id(text) IS 'A node''s id from its id, site/name or name; a name several sites use is refused (INVALID_ARGUMENT naming each).';

CREATE FUNCTION ops.node_cordon(p_node text, p_reason text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.node_flag_set(ops.node_id(p_node), 'cordoned', session_user, p_reason) $$;
COMMENT ON FUNCTION ops.node_cordon(text, text) IS 'Stop new placements on a node.';

CREATE FUNCTION ops.node_drain(p_node text, p_reason text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.node_flag_set(ops.node_id(p_node), 'draining', session_user, p_reason) $$;
COMMENT ON FUNCTION ops.node_drain(text, text) IS 'Stop new placements and wait for the node''s current bookings to end (ops.nodes.drain).';

CREATE FUNCTION ops.node_quarantine(p_node text, p_reason text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.node_flag_set(ops.node_id(p_node), 'quarantined', session_user, p_reason) $$;
COMMENT ON FUNCTION ops.node_quarantine(text, text) IS 'Keep a node out of placement after failed provisioning or remediation.';

CREATE FUNCTION ops.node_clear(p_node text, p_flag text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.node_flag_clear(ops.node_id(p_node), p_flag) $$;
COMMENT ON FUNCTION ops.node_clear(text, text) IS 'Clear a flag (cordoned, draining, quarantined): uncordon, stop a drain, unquarantine.';

CREATE FUNCTION ops.capacity_free(p_pool_id uuid, p_shape text, p_start timestamptz, p_end timestamptz)
RETURNS TABLE (node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.capacity_free(p_pool_id, p_shape, p_start, p_end) $$;
COMMENT ON FUNCTION ops.capacity_free(uuid, text, timestamptz, timestamptz) IS 'Atoms of a shape free for the whole window, per node.';

CREATE FUNCTION ops.capacity_earliest(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
                                      p_not_before timestamptz DEFAULT NULL)
RETURNS TABLE (start_at timestamptz, end_at timestamptz, reason text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.capacity_earliest(p_pool_id, p_shape, p_count, p_duration, p_not_before) $$;
COMMENT ON FUNCTION ops.capacity_earliest(uuid, text, integer, interval, timestamptz) IS 'Earliest window for count atoms of a shape, or the reason there is none.';

CREATE FUNCTION ops.device_set_layout(p_device_uuid text, p_layout text, p_at timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
DECLARE
    v_device_id uuid := (SELECT d.device_id FROM compute.devices AS d WHERE d.uuid = p_device_uuid);
BEGIN
    IF v_device_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no GPU %L', p_device_uuid),
            'Name a GPU by its uuid (GPU-…), as ops.devices lists them.');
    END IF;
    RETURN compute.device_set_layout(v_device_id, p_layout, p_at);
END
$$;
COMMENT ON FUNCTION ops.device_set_layout(text, text, timestamptz) IS 'Change a GPU''s layout (whole | timeslice:N | mig:profile@placement,...) now or at a future time.';
