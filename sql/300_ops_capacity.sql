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

CREATE FUNCTION ops.node_id(p_node text)
RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = ''
AS $$
DECLARE
    v_node_id uuid;
BEGIN
    SELECT n.node_id INTO v_node_id FROM compute.nodes AS n
     WHERE n.node_id::text = p_node OR n.name = p_node;
    IF v_node_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %L', p_node), 'Name a node by its id or name (see ops.nodes).');
    END IF;
    RETURN v_node_id;
END
$$;
COMMENT ON FUNCTION ops.node_id(text) IS 'A node''s id from its id or name.';

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
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.device_set_layout((SELECT d.device_id FROM compute.devices AS d WHERE d.uuid = p_device_uuid), p_layout, p_at) $$;
COMMENT ON FUNCTION ops.device_set_layout(text, text, timestamptz) IS 'Change a GPU''s layout (whole | timeslice:N | mig:profile@placement,...) now or at a future time.';
