-- Deploy better_compute:timeline_reads_held to pg
-- capacity.timeline reads a live booking as held and shows a booking's state as its reservation makes it (compute.booking_state)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.api_capacity_timeline(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_pool_id uuid := compute.input_uuid(p_input, 'pool_id');
    v_node_id uuid := compute.input_uuid(p_input, 'node_id', false);
    v_start   timestamptz := coalesce(compute.request_timestamp(p_input, 'start', false), v_now);
    v_end     timestamptz := compute.request_timestamp(p_input, 'end', true);
    v_limit   integer := compute.list_limit(p_input);
    v_window  tstzrange;
    v_nodes   jsonb;
    v_rows    jsonb;
BEGIN
    IF v_end <= v_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('end %s is not after start %s', v_end, v_start),
            'Pass an end after start (start defaults to now).');
    END IF;
    IF v_end - v_start > compute.limit('capacity_search_horizon_seconds') * interval '1 second' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the window from %s to %s is too long', v_start, v_end),
            pg_catalog.format('Ask for at most %s seconds (limit capacity_search_horizon_seconds).',
                              compute.limit('capacity_search_horizon_seconds')));
    END IF;
    v_window := pg_catalog.tstzrange(v_start, v_end, '[)');
    -- The pool is the tenant's (api.prepare checked it before the decision); its nodes, each with
    -- its devices and the atoms valid at some time in the window (a layout change shows both).
    SELECT coalesce(pg_catalog.jsonb_agg(compute.node_json(n.node_id) - 'devices' || pg_catalog.jsonb_build_object('devices',
               (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('uuid', d.uuid, 'index', d.index, 'model', d.model,
                           'memory_mib', d.memory_mib, 'layout', d.layout, 'present', d.present,
                           'atoms', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('atom_id', a.atom_id,
                                             'kind', a.kind, 'shape', a.shape, 'profile', a.profile, 'placement', a.placement,
                                             'slot', a.slot, 'valid_from', lower(a.valid), 'valid_until', upper(a.valid))
                                         ORDER BY lower(a.slices), a.slot, lower(a.valid)), '[]')
                                       FROM compute.atoms AS a WHERE a.device_id = d.device_id AND a.valid && v_window))
                         ORDER BY d.index), '[]')
                  FROM compute.devices AS d WHERE d.node_id = n.node_id)) ORDER BY n.name), '[]')
      INTO v_nodes
      FROM (SELECT n.node_id, n.name FROM compute.nodes AS n
             WHERE n.pool_id = v_pool_id AND n.node_id = coalesce(v_node_id, n.node_id)
             ORDER BY n.name LIMIT v_limit) AS n;
    -- Bookings that hold or will hold their atom during the window (bookings_pool), and the caller's
    -- own released ones (bookings_tenant_pool): others' history is nobody else's business; voided
    -- bookings never held anything.
    SELECT coalesce(pg_catalog.jsonb_agg(x.booking ORDER BY x.n), '[]') INTO v_rows
      FROM (SELECT CASE WHEN b.tenant_id = p_tenant_id THEN
                        pg_catalog.jsonb_build_object('atom_id', b.atom_id, 'start', lower(b.during), 'end', upper(b.during),
                            'state', compute.booking_state(b.state, r.state), 'reservation_id', b.reservation_id, 'project_id', b.project_id, 'shape', r.shape,
                            'readiness', CASE WHEN b.state = 'held' AND upper(b.during) > v_now
                                              THEN compute.booking_readiness(b.booking_id) END)
                   ELSE pg_catalog.jsonb_build_object('atom_id', b.atom_id, 'start', lower(b.during), 'end', upper(b.during), 'busy', true)
                   END AS booking,
                   pg_catalog.row_number() OVER (ORDER BY lower(b.during), b.booking_id) AS n
              FROM (SELECT * FROM compute.bookings AS b
                     WHERE b.pool_id = v_pool_id AND b.during && v_window AND b.state = 'held'
                    UNION ALL
                    SELECT * FROM compute.bookings AS b
                     WHERE b.tenant_id = p_tenant_id AND b.pool_id = v_pool_id AND upper(b.during) > v_start
                       AND b.state = 'released' AND b.during && v_window) AS b
              JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
             WHERE b.node_id = coalesce(v_node_id, b.node_id)
             ORDER BY lower(b.during), b.booking_id LIMIT v_limit + 1) AS x;
    RETURN pg_catalog.jsonb_build_object('pool_id', v_pool_id, 'start', v_start, 'end', v_end, 'now', v_now, 'nodes', v_nodes,
        'bookings', CASE WHEN pg_catalog.jsonb_array_length(v_rows) > v_limit THEN v_rows - v_limit ELSE v_rows END,
        'truncated', pg_catalog.jsonb_array_length(v_rows) > v_limit);
END
$function$;

COMMIT;
