-- Deploy better_compute:gone_is_not_found to pg
-- quotas.get for a project the tenant does not have, and webhooks.replay of a deleted webhook, are
-- NOT_FOUND (they answered a quota of nulls, and replayed: 0).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.api_quotas_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_project_id uuid := compute.input_uuid(p_input, 'project_id', false);
BEGIN
    IF v_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = v_project_id AND p.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in this tenant', v_project_id),
            'projects.list shows the tenant''s projects; omit project_id for the tenant''s own quota.');
    END IF;
    RETURN (SELECT compute.quota_json(p_tenant_id, p.pool_id, v_project_id)
              FROM compute.tenant_pools(p_tenant_id) AS p WHERE p.pool_id = compute.input_uuid(p_input, 'pool_id'));
END
$$;
COMMENT ON FUNCTION compute.api_quotas_get(uuid, jsonb) IS 'quotas.get';

CREATE OR REPLACE FUNCTION compute.api_webhooks_replay(p_tenant_id uuid, p_resource_id text, p_input jsonb)
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

COMMIT;
