-- API methods on a tenant's events, audit proofs and webhooks (catalog rows in sql/690_api_methods.sql).
-- An event's cursor is 'xid:event_id' of the outbox: events are answered in commit order, only of
-- transactions that have all finished (compute.outbox_read), so a reader resuming after a cursor
-- misses nothing.
SET LOCAL ROLE bc_owner;

-- -- events -------------------------------------------------------------------------------------------

CREATE FUNCTION compute.events_page(p_tenant_id uuid, p_after text, p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_after_xid xid8 := '0';
    v_after_id  bigint := 0;
    v_events    jsonb;
BEGIN
    IF p_after IS NOT NULL AND p_after <> '' THEN
        IF p_after !~ '^[0-9]{1,19}:[0-9]{1,18}$' THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid event cursor %L', pg_catalog.left(p_after, 60)),
                'Pass the id of the last event you saw (xid:event_id), or nothing to start at the oldest.');
        END IF;
        v_after_xid := pg_catalog.split_part(p_after, ':', 1)::xid8;
        v_after_id := pg_catalog.split_part(p_after, ':', 2)::bigint;
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > compute.limit('outbox_read_batch') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('limit %s is out of range', p_limit),
            pg_catalog.format('Ask for 1 to %s events (limit outbox_read_batch).', compute.limit('outbox_read_batch')));
    END IF;
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', e.xid::text || ':' || e.event_id, 'type', e.event_type,
               'aggregate_type', e.aggregate_type, 'aggregate_id', e.aggregate_id, 'seq', e.aggregate_seq,
               'payload', e.payload, 'occurred_at', e.occurred_at) ORDER BY e.xid, e.event_id), '[]')
      INTO v_events
      FROM compute.outbox_read(v_after_xid, v_after_id, p_tenant_id, p_limit) AS e;
    RETURN pg_catalog.jsonb_build_object('events', v_events,
        'next', coalesce(v_events -> -1 ->> 'id', CASE WHEN v_after_id > 0 THEN p_after END));
END
$$;
COMMENT ON FUNCTION compute.events_page(uuid, text, integer) IS 'A tenant''s events after a cursor, in commit order, and the cursor to go on from.';

CREATE FUNCTION api.events(p_tenant_id uuid, p_after text, p_limit integer)
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    SELECT compute.events_page(p_tenant_id, p_after, p_limit);
$$;
COMMENT ON FUNCTION api.events(uuid, text, integer) IS 'The watch stream''s source (after its one IAM decision at connect): events after a cursor.';

CREATE FUNCTION compute.api_events_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.events_page(p_tenant_id, compute.input_text(p_input, 'after', false),
                               coalesce(compute.input_integer(p_input, 'limit', false), 100));
$$;
COMMENT ON FUNCTION compute.api_events_list(uuid, jsonb) IS 'events.list';

-- -- audit --------------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_audit_proof(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.audit_proof(e.event_id) FROM compute.audit_events AS e
     WHERE e.event_id = compute.input_integer(p_input, 'event_id') AND e.tenant_id = p_tenant_id;
$$;
COMMENT ON FUNCTION compute.api_audit_proof(uuid, jsonb) IS 'audit.proof: inclusion proof of one of the tenant''s audit events';

-- -- webhooks -----------------------------------------------------------------------------------------

CREATE FUNCTION compute.webhook_json(p_webhook compute.webhooks)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('webhook_id', p_webhook.webhook_id, 'url', p_webhook.url, 'event_types', p_webhook.event_types,
        'active', p_webhook.active, 'created_at', p_webhook.created_at,
        'dead_deliveries', (SELECT count(*) FROM compute.webhook_deliveries AS d WHERE d.webhook_id = p_webhook.webhook_id AND d.state = 'dead'));
$$;
COMMENT ON FUNCTION compute.webhook_json(compute.webhooks) IS 'A webhook as the API answers it (never its secret).';

CREATE FUNCTION compute.api_webhooks_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_types jsonb := coalesce(compute.request_field(p_input, 'event_types', 'array', false), '[]');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_types) AS t WHERE pg_catalog.jsonb_typeof(t) <> 'string') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'event_types is a list of strings', 'e.g. ["reservation.*"]');
    END IF;
    PERFORM compute.webhook_create(p_tenant_id, compute.input_text(p_input, 'url'), compute.input_text(p_input, 'sealed_secret'),
        ARRAY(SELECT pg_catalog.jsonb_array_elements_text(v_types)), p_resource_id::uuid);
    RETURN (SELECT compute.webhook_json(w) FROM compute.webhooks AS w WHERE w.webhook_id = p_resource_id::uuid);
END
$$;
COMMENT ON FUNCTION compute.api_webhooks_create(uuid, text, jsonb) IS 'webhooks.create';

CREATE FUNCTION compute.api_webhooks_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.webhook_json(w) ORDER BY w.created_at), '[]')
      FROM compute.webhooks AS w WHERE w.tenant_id = p_tenant_id AND w.active;
$$;
COMMENT ON FUNCTION compute.api_webhooks_list(uuid, jsonb) IS 'webhooks.list (active subscriptions)';

CREATE FUNCTION compute.api_webhooks_delete(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_webhook compute.webhooks;
BEGIN
    -- Kept (inactive) for its delivery history; what it had not yet delivered is dropped.
    UPDATE compute.webhooks SET active = false WHERE webhook_id = p_resource_id::uuid RETURNING * INTO v_webhook;
    DELETE FROM compute.webhook_deliveries WHERE webhook_id = p_resource_id::uuid AND state = 'pending';
    RETURN compute.webhook_json(v_webhook);
END
$$;
COMMENT ON FUNCTION compute.api_webhooks_delete(uuid, text, jsonb) IS 'webhooks.delete';

CREATE FUNCTION compute.api_webhooks_replay(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_delivery_id uuid := compute.input_uuid(p_input, 'delivery_id', false);
    v_replayed    integer := 0;
    v_dead        uuid;
BEGIN
    IF NOT (SELECT w.active FROM compute.webhooks AS w WHERE w.webhook_id = p_resource_id::uuid) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('webhook %s was deleted', p_resource_id),
            'Deleted webhooks send nothing more; create a new one (webhooks.create) and replay from the event stream.');
    END IF;
    FOR v_dead IN
        SELECT d.delivery_id FROM compute.webhook_deliveries AS d
         WHERE d.webhook_id = p_resource_id::uuid AND d.state = 'dead' AND d.delivery_id = coalesce(v_delivery_id, d.delivery_id)
         ORDER BY d.created_at LIMIT compute.limit('sweep_batch')
    LOOP
        PERFORM compute.webhook_replay(v_dead);
        v_replayed := v_replayed + 1;
    END LOOP;
    IF v_delivery_id IS NOT NULL AND v_replayed = 0 THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no dead-lettered delivery %s of this webhook', v_delivery_id),
            'webhooks.list shows how many deliveries are dead.');
    END IF;
    RETURN pg_catalog.jsonb_build_object('webhook_id', p_resource_id, 'replayed', v_replayed);
END
$$;
COMMENT ON FUNCTION compute.api_webhooks_replay(uuid, text, jsonb) IS 'webhooks.replay: one dead-lettered delivery, or all of them (bounded)';
