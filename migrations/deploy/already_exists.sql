-- Deploy better_compute:already_exists to pg
-- A name that exists already (a site, a pool in its site, a project) is ALREADY_EXISTS (BC419, HTTP
-- 409), not INVALID_ARGUMENT: the request was well formed, it conflicts with what is there, and a
-- client retrying a create without an idempotency key can tell the two apart.

BEGIN;

SET LOCAL ROLE bc_owner;

INSERT INTO compute.error_codes (code, sqlstate, http_status, meaning) VALUES
    ('ALREADY_EXISTS', 'BC419', 409, 'An object with that name exists already.');

CREATE OR REPLACE FUNCTION compute.pool_create(p_site_id uuid, p_name text, p_gpu_model text, p_placement_policy text DEFAULT 'pack',
                                    p_pool_id uuid DEFAULT NULL)
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
        PERFORM compute.raise_error('ALREADY_EXISTS',
            pg_catalog.format('pool %s already exists for %s', p_name, v_model),
            'A pool holds exactly one GPU model: choose another name for another model.');
    END IF;
    INSERT INTO compute.pools AS p (pool_id, site_id, name, gpu_model, placement_policy, created_at)
    VALUES (coalesce(p_pool_id, pg_catalog.gen_random_uuid()), p_site_id, p_name, p_gpu_model, p_placement_policy, compute.compute_now())
    ON CONFLICT (site_id, name) DO UPDATE SET placement_policy = EXCLUDED.placement_policy
    RETURNING p.pool_id INTO v_pool_id;
    RETURN v_pool_id;
END
$$;
COMMENT ON FUNCTION compute.pool_create(uuid, text, text, text, uuid) IS 'Create a pool of one GPU model in a site (or change its placement policy).';

CREATE OR REPLACE FUNCTION compute.api_sites_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := compute.input_text(p_input, 'name');
BEGIN
    IF compute.site_create(v_name, p_tenant_id, p_resource_id::uuid) <> p_resource_id::uuid THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('site %s already exists', v_name),
            'Choose another name, or use the existing site (sites.list).');
    END IF;
    RETURN (SELECT compute.site_json(s) FROM compute.sites AS s WHERE s.site_id = p_resource_id::uuid);
END
$$;
COMMENT ON FUNCTION compute.api_sites_create(uuid, text, jsonb) IS 'sites.create';

CREATE OR REPLACE FUNCTION compute.api_pools_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_site_id uuid := compute.input_uuid(p_input, 'site_id');
    v_name    text := compute.input_text(p_input, 'name');
BEGIN
    IF EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.site_id = v_site_id AND p.name = v_name) THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('pool %s already exists in this site', v_name),
            'Choose another name, or change the existing pool with pools.update.');
    END IF;
    PERFORM compute.pool_create(v_site_id, v_name, compute.input_text(p_input, 'gpu_model'),
                                coalesce(compute.input_text(p_input, 'placement_policy', false), 'pack'), p_resource_id::uuid);
    RETURN (SELECT compute.pool_json(p) FROM compute.pools AS p WHERE p.pool_id = p_resource_id::uuid);
END
$$;
COMMENT ON FUNCTION compute.api_pools_create(uuid, text, jsonb) IS 'pools.create';

CREATE OR REPLACE FUNCTION compute.api_projects_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := compute.input_text(p_input, 'name');
BEGIN
    IF compute.project_create(p_tenant_id, v_name, p_resource_id::uuid) <> p_resource_id::uuid THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('project %s already exists', v_name),
            'Choose another name, or use the existing project (projects.list).');
    END IF;
    RETURN (SELECT compute.project_json(p) FROM compute.projects AS p WHERE p.project_id = p_resource_id::uuid);
END
$$;
COMMENT ON FUNCTION compute.api_projects_create(uuid, text, jsonb) IS 'projects.create';

COMMIT;
