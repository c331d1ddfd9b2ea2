-- Revert better_compute:api_ids from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.pool_create(uuid, text, text, text, uuid);
CREATE FUNCTION compute.pool_create(p_site_id uuid, p_name text, p_gpu_model text, p_placement_policy text DEFAULT 'pack')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_model   text;
    v_pool_id uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.sites AS s WHERE s.site_id = p_site_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site %s', p_site_id), 'Create the site first.');
    END IF;
    PERFORM compute.require_name('pool', p_name);
    IF p_gpu_model IS NULL OR length(p_gpu_model) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a pool needs its GPU model',
            'Pass the model exactly as the GPUs report it, e.g. NVIDIA H200.');
    END IF;
    IF p_placement_policy IS NULL OR p_placement_policy NOT IN ('pack', 'spread') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid placement policy %L', p_placement_policy),
            'Use pack (fill partly used nodes first) or spread (emptiest nodes first).');
    END IF;
    SELECT p.gpu_model INTO v_model FROM compute.pools AS p WHERE p.site_id = p_site_id AND p.name = p_name;
    IF v_model <> p_gpu_model THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('pool %s already exists for %s', p_name, v_model),
            'A pool holds exactly one GPU model: choose another name for another model.');
    END IF;
    INSERT INTO compute.pools AS p (pool_id, site_id, name, gpu_model, placement_policy, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_site_id, p_name, p_gpu_model, p_placement_policy, compute.compute_now())
    ON CONFLICT (site_id, name) DO UPDATE SET placement_policy = EXCLUDED.placement_policy
    RETURNING p.pool_id INTO v_pool_id;
    RETURN v_pool_id;
END
$$;
COMMENT ON FUNCTION compute.pool_create(uuid, text, text, text) IS 'Create a pool of one GPU model in a site (or change its placement policy).';

DROP FUNCTION compute.project_create(uuid, text, uuid);
CREATE FUNCTION compute.project_create(p_tenant_id uuid, p_name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_project_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    PERFORM compute.require_name('project', p_name);
    INSERT INTO compute.projects (project_id, tenant_id, name, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_tenant_id, p_name, compute.compute_now())
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING project_id INTO v_project_id;
    IF v_project_id IS NULL THEN
        SELECT p.project_id INTO v_project_id FROM compute.projects AS p WHERE p.tenant_id = p_tenant_id AND p.name = p_name;
    END IF;
    RETURN v_project_id;
END
$$;
COMMENT ON FUNCTION compute.project_create(uuid, text) IS 'Create a project in a tenant, or return the existing one of that name.';

DROP FUNCTION compute.offering_create(uuid, text, integer, interval, text, uuid);
CREATE FUNCTION compute.offering_create(p_pool_id uuid, p_shape text, p_max_count integer, p_max_duration interval,
                                        p_instance_kind text DEFAULT 'devices')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_offering_id uuid;
BEGIN
    PERFORM compute.pool_get(p_pool_id);
    IF p_shape IS NULL OR p_shape !~ '^(gpu|slot|mig:[0-9]+g\.[0-9]+gb(\+me)?)$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid shape %L', p_shape),
            'Use gpu, slot or mig:<profile> (e.g. mig:3g.71gb).');
    END IF;
    IF p_max_count IS NULL OR p_max_count < 1 OR p_max_count > compute.limit('atoms_per_reservation') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_count %s is out of range', p_max_count),
            pg_catalog.format('Use 1 to %s (limit atoms_per_reservation).', compute.limit('atoms_per_reservation')));
    END IF;
    IF p_max_duration IS NULL OR p_max_duration <= interval '0'
       OR p_max_duration > compute.limit('reservation_window_seconds') * interval '1 second' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_duration %s is out of range', p_max_duration),
            pg_catalog.format('Use a positive interval up to %s seconds (limit reservation_window_seconds).',
                              compute.limit('reservation_window_seconds')));
    END IF;
    IF p_instance_kind IS NULL OR p_instance_kind NOT IN ('devices', 'bare_metal', 'vps') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid instance kind %L', p_instance_kind),
            'Use devices, bare_metal or vps.');
    END IF;
    INSERT INTO compute.offerings AS o (offering_id, pool_id, shape, instance_kind, max_count, max_duration, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_pool_id, p_shape, p_instance_kind, p_max_count, p_max_duration, compute.compute_now())
    ON CONFLICT (pool_id, shape, instance_kind)
        DO UPDATE SET max_count = EXCLUDED.max_count, max_duration = EXCLUDED.max_duration
    RETURNING o.offering_id INTO v_offering_id;
    RETURN v_offering_id;
END
$$;
COMMENT ON FUNCTION compute.offering_create(uuid, text, integer, interval, text) IS 'Offer a shape in a pool (or change the limits of the offer).';

DROP FUNCTION compute.webhook_create(uuid, text, text, text[], uuid);
CREATE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_secret text, p_event_types text[] DEFAULT '{}')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_webhook_id uuid := pg_catalog.gen_random_uuid();
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF p_url IS NULL OR length(p_url) > 2000 OR p_url !~ '^https?://[^\s]+$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid webhook URL %L', pg_catalog.left(p_url, 200)),
            'Pass an http(s) URL of at most 2000 characters.');
    END IF;
    IF p_secret IS NULL OR length(p_secret) NOT BETWEEN 16 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a webhook secret has 16 to 200 characters', 'Use a long random secret.');
    END IF;
    IF (SELECT count(*) FROM compute.webhooks AS w WHERE w.tenant_id = p_tenant_id AND w.active) >= compute.limit('webhooks_per_tenant') THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED', 'this tenant has as many webhooks as it may',
            pg_catalog.format('Delete one first (limit webhooks_per_tenant = %s).', compute.limit('webhooks_per_tenant')));
    END IF;
    INSERT INTO compute.webhooks (webhook_id, tenant_id, url, secret, event_types, created_at)
    VALUES (v_webhook_id, p_tenant_id, p_url, p_secret, coalesce(p_event_types, '{}'), compute.compute_now());
    RETURN v_webhook_id;
END
$$;
COMMENT ON FUNCTION compute.webhook_create(uuid, text, text, text[]) IS 'Subscribe a tenant''s URL to its events.';


COMMIT;
