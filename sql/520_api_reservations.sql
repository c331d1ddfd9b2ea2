-- API methods on reservations and capacity (catalog rows in sql/690_api_methods.sql).
-- reservations.create is the one method with provisional rows: api.prepare calls
-- compute.api_reservations_prepare (the reservation and its bookings, provisional, exclusive,
-- expiring), so that IAM decides on the exact placement; api.admit activates it or voids it.
SET LOCAL ROLE bc_owner;

-- -- reservations -------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_reservations_prepare(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_id uuid;
BEGIN
    -- The admission keeps the idempotency key; compute.reserve_hold gets the request without it. No
    -- document is built here: the IAM request needs the window and the nodes only (the answer is
    -- activation's document).
    v_id := compute.reserve_hold(p_input - 'idempotency_key' || pg_catalog.jsonb_build_object('tenant_id', p_tenant_id));
    RETURN (SELECT pg_catalog.jsonb_build_object('id', r.reservation_id::text,
                       'attributes', pg_catalog.jsonb_build_object('start', lower(r.during), 'end', upper(r.during),
                           'nodes', (SELECT pg_catalog.jsonb_agg(DISTINCT n.name) FROM compute.bookings AS b
                                       JOIN compute.nodes AS n ON n.node_id = b.node_id WHERE b.reservation_id = r.reservation_id)))
              FROM compute.reservations AS r WHERE r.reservation_id = v_id);
END
$$;
COMMENT ON FUNCTION compute.api_reservations_prepare(uuid, jsonb) IS 'reservations.create, before the decision: place and book provisionally.';

CREATE FUNCTION compute.api_reservations_create(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.reservation_activate(p_resource_id::uuid); $$;
COMMENT ON FUNCTION compute.api_reservations_create(uuid, text, jsonb) IS 'reservations.create, on allow: activate.';

CREATE FUNCTION compute.api_reservations_void(p_resource_id text) RETURNS void
LANGUAGE sql AS $$ SELECT compute.reservation_void(p_resource_id::uuid); $$;
COMMENT ON FUNCTION compute.api_reservations_void(text) IS 'reservations.create, on deny or expiry: void.';

CREATE FUNCTION compute.api_reservations_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.reservation_document(r.reservation_id) FROM compute.reservations AS r
     WHERE r.reservation_id = compute.input_uuid(p_input, 'reservation_id') AND r.tenant_id = p_tenant_id;
$$;
COMMENT ON FUNCTION compute.api_reservations_get(uuid, jsonb) IS 'reservations.get';

CREATE FUNCTION compute.api_reservations_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_pool_id uuid := compute.input_uuid(p_input, 'pool_id', false);
    v_state   text := compute.input_text(p_input, 'state', false);
BEGIN
    IF v_state IS NOT NULL AND v_state NOT IN ('provisional', 'active', 'released', 'cancelled', 'void', 'expired') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown state %L', v_state),
            'Use provisional, active, released, cancelled, void or expired.');
    END IF;
    RETURN (SELECT coalesce(pg_catalog.jsonb_agg(compute.reservation_document(r.reservation_id) ORDER BY r.created_at DESC), '[]')
              FROM (SELECT r.reservation_id, r.created_at FROM compute.reservations AS r
                     WHERE r.tenant_id = p_tenant_id AND r.pool_id = coalesce(v_pool_id, r.pool_id) AND r.state = coalesce(v_state, r.state)
                     ORDER BY r.created_at DESC LIMIT compute.list_limit(p_input)) AS r);
END
$$;
COMMENT ON FUNCTION compute.api_reservations_list(uuid, jsonb) IS 'reservations.list (newest first)';

CREATE FUNCTION compute.api_reservations_extend(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    -- Compare and set with expected_end, under the row lock (compute.reservation_extend_check).
    PERFORM compute.reservation_extend_check(compute.reservation_lock(p_resource_id::uuid),
        compute.request_timestamp(p_input, 'end', true), compute.request_timestamp(p_input, 'expected_end', false));
    RETURN compute.reservation_extend(p_resource_id::uuid, compute.request_timestamp(p_input, 'end', true));
END
$$;
COMMENT ON FUNCTION compute.api_reservations_extend(uuid, text, jsonb) IS 'reservations.extend (compare-and-set with expected_end)';

CREATE FUNCTION compute.api_reservations_extend_check(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS void
LANGUAGE sql STABLE AS $$
    SELECT compute.reservation_extend_check(r, compute.request_timestamp(p_input, 'end', true),
                                            compute.request_timestamp(p_input, 'expected_end', false))
      FROM compute.reservations AS r WHERE r.reservation_id = p_resource_id::uuid;
$$;
COMMENT ON FUNCTION compute.api_reservations_extend_check(uuid, text, jsonb) IS 'reservations.extend, before the decision: the new end is one the reservation may take.';

CREATE FUNCTION compute.api_reservations_renew_check(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS void
LANGUAGE sql STABLE AS $$
    SELECT compute.reservation_renew_check(r) FROM compute.reservations AS r WHERE r.reservation_id = p_resource_id::uuid;
$$;
COMMENT ON FUNCTION compute.api_reservations_renew_check(uuid, text, jsonb) IS 'reservations.renew, before the decision: the lease may be renewed.';

CREATE FUNCTION compute.api_reservations_renew(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.reservation_renew(p_resource_id::uuid); $$;
COMMENT ON FUNCTION compute.api_reservations_renew(uuid, text, jsonb) IS 'reservations.renew';

CREATE FUNCTION compute.api_reservations_release(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.reservation_release(p_resource_id::uuid); $$;
COMMENT ON FUNCTION compute.api_reservations_release(uuid, text, jsonb) IS 'reservations.release';

-- -- capacity -----------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_capacity_shape(p_input jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Capacity is counted in atoms of one shape; whole machines are not counted yet (fail closed, P11).
    IF compute.input_text(p_input, 'shape') = 'bare_metal' THEN
        PERFORM compute.raise_error('UNSUPPORTED', 'capacity of whole machines (shape bare_metal) is not counted yet',
            'Reserve shape bare_metal (a CAPACITY_CONFLICT says how many machines are free), or ask for the shape gpu.');
    END IF;
    RETURN compute.input_text(p_input, 'shape');
END
$$;
COMMENT ON FUNCTION compute.api_capacity_shape(jsonb) IS 'The shape capacity.free and capacity.earliest count: an atom shape (bare_metal is UNSUPPORTED).';

CREATE FUNCTION compute.api_capacity_free(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('node_id', f.node_id, 'node', f.node_name,
                                                                       'free_atoms', f.free_atoms, 'atom_ids', f.atom_ids)
                                         ORDER BY f.node_name), '[]')
      FROM compute.capacity_free(compute.input_uuid(p_input, 'pool_id'), compute.api_capacity_shape(p_input),
                                 coalesce(compute.request_timestamp(p_input, 'start', false), compute.compute_now()),
                                 compute.request_timestamp(p_input, 'end', true)) AS f;
$$;
COMMENT ON FUNCTION compute.api_capacity_free(uuid, jsonb) IS 'capacity.free: atoms free for the whole window, per node';

CREATE FUNCTION compute.api_capacity_earliest(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('start', e.start_at, 'end', e.end_at, 'reason', e.reason)
      FROM compute.capacity_earliest(compute.input_uuid(p_input, 'pool_id'), compute.api_capacity_shape(p_input),
                                     compute.input_integer(p_input, 'count'),
                                     compute.input_integer(p_input, 'duration_seconds') * interval '1 second',
                                     compute.request_timestamp(p_input, 'not_before', false)) AS e;
$$;
COMMENT ON FUNCTION compute.api_capacity_earliest(uuid, jsonb) IS 'capacity.earliest: earliest start of count atoms for a duration, or why none';

CREATE FUNCTION compute.api_capacity_rollup(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('pool_id', c.pool_id, 'pool', c.pool, 'shape', c.shape,
               'total', c.total, 'bookable', c.bookable, 'held_now', c.held_now, 'held_future', c.held_future,
               'cordoned', c.cordoned) ORDER BY c.pool, c.shape), '[]')
      FROM ops.pool_capacity AS c JOIN compute.tenant_pools(p_tenant_id) AS p ON p.pool_id = c.pool_id
     WHERE c.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), c.pool_id);
$$;
COMMENT ON FUNCTION compute.api_capacity_rollup(uuid, jsonb) IS 'capacity.rollup: atoms per pool and shape (total, bookable, held now, held in future, cordoned)';
