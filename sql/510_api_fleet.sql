-- API methods on the fleet: sites, pools, offerings, quotas, projects, nodes (catalog rows in
-- sql/690_api_methods.sql). Each is scoped to the tenant IAM decided for: api.prepare has already
-- checked that the named resource and its parent are the tenant's; reads filter by tenant again.
-- Signatures: reads (p_tenant_id, p_input), mutations (p_tenant_id, p_resource_id, p_input).
SET LOCAL ROLE bc_owner;

-- -- answers ------------------------------------------------------------------------------------------

CREATE FUNCTION compute.site_json(p_site compute.sites)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('site_id', p_site.site_id, 'name', p_site.name, 'created_at', p_site.created_at);
$$;
COMMENT ON FUNCTION compute.site_json(compute.sites) IS 'A site as the API answers it.';

CREATE FUNCTION compute.pool_json(p_pool compute.pools)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('pool_id', p_pool.pool_id, 'site_id', p_pool.site_id, 'name', p_pool.name,
        'gpu_model', p_pool.gpu_model, 'placement_policy', p_pool.placement_policy, 'created_at', p_pool.created_at);
$$;
COMMENT ON FUNCTION compute.pool_json(compute.pools) IS 'A pool as the API answers it.';

CREATE FUNCTION compute.offering_json(p_offering compute.offerings)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('offering_id', p_offering.offering_id, 'pool_id', p_offering.pool_id,
        'shape', p_offering.shape, 'max_count', p_offering.max_count,
        'max_duration_seconds', extract(epoch FROM p_offering.max_duration)::bigint, 'created_at', p_offering.created_at)
        || CASE WHEN p_offering.instance_kind <> 'devices' THEN pg_catalog.jsonb_build_object('instance_kind', p_offering.instance_kind,
               'vcpus_per_atom', p_offering.vcpus_per_atom, 'memory_mib_per_atom', p_offering.memory_mib_per_atom) ELSE '{}' END;
$$;
COMMENT ON FUNCTION compute.offering_json(compute.offerings) IS 'An offering as the API answers it.';

CREATE FUNCTION compute.tenant_pools(p_tenant_id uuid)
RETURNS SETOF compute.pools
LANGUAGE sql STABLE
AS $$
    SELECT p.* FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id WHERE s.tenant_id = p_tenant_id;
$$;
COMMENT ON FUNCTION compute.tenant_pools(uuid) IS 'The pools of a tenant''s sites.';

CREATE FUNCTION compute.node_json(p_node_id uuid)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
-- PL/pgSQL: it reads node_specs (sql/610), which exists only after this file is loaded.
BEGIN
    RETURN (SELECT pg_catalog.jsonb_build_object('node_id', n.node_id, 'name', n.name, 'pool_id', pn.pool_id, 'gpus', n.gpus,
        'flags', coalesce(pg_catalog.to_jsonb(n.flags), '[]'), 'drain', n.drain, 'flag_details', coalesce(n.flag_details, '{}'),
        'inventory_at', n.inventory_at, 'created_at', n.created_at, 'connected', n.connected, 'last_heard_seconds', n.last_heard_seconds,
        -- Conditions: a GPU the last inventory lacked (no new placements on it; its bookings stay),
        -- then what the daemon reported with its last observed spec.
        'conditions', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('type', 'DeviceMissing', 'device_uuid', d.uuid,
                                                                                           'index', d.index) ORDER BY d.index), '[]')
                         FROM compute.devices AS d WHERE d.node_id = n.node_id AND NOT d.present)
                      || coalesce((SELECT s.conditions FROM compute.node_specs AS s WHERE s.node_id = n.node_id), '[]'),
        'devices', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('uuid', d.uuid, 'index', d.index,
                        'model', d.model, 'memory_mib', d.memory_mib, 'layout', d.layout, 'present', d.present) ORDER BY d.index), '[]')
                      FROM compute.devices AS d WHERE d.node_id = n.node_id))
      FROM ops.nodes AS n JOIN compute.nodes AS pn ON pn.node_id = n.node_id
     WHERE n.node_id = p_node_id);
END
$$;
COMMENT ON FUNCTION compute.node_json(uuid) IS 'A node as the API answers it: flags with who/why/when, drain state, devices.';

-- -- sites --------------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_sites_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
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

CREATE FUNCTION compute.api_sites_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.site_json(s) ORDER BY s.name), '[]')
      FROM (SELECT * FROM compute.sites AS s WHERE s.tenant_id = p_tenant_id ORDER BY s.name
             LIMIT compute.list_limit(p_input)) AS s;
$$;
COMMENT ON FUNCTION compute.api_sites_list(uuid, jsonb) IS 'sites.list';

CREATE FUNCTION compute.api_sites_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.site_json(s) FROM compute.sites AS s
     WHERE s.site_id = compute.input_uuid(p_input, 'site_id') AND s.tenant_id = p_tenant_id;
$$;
COMMENT ON FUNCTION compute.api_sites_get(uuid, jsonb) IS 'sites.get';

-- -- pools --------------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_pools_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
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

CREATE FUNCTION compute.api_pools_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.pool_json(p) ORDER BY p.name), '[]')
      FROM (SELECT * FROM compute.tenant_pools(p_tenant_id) AS p
             WHERE p.site_id = coalesce(compute.input_uuid(p_input, 'site_id', false), p.site_id)
             ORDER BY p.name LIMIT compute.list_limit(p_input)) AS p;
$$;
COMMENT ON FUNCTION compute.api_pools_list(uuid, jsonb) IS 'pools.list';

CREATE FUNCTION compute.api_pools_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.pool_json(p) || pg_catalog.jsonb_build_object('offerings',
               (SELECT coalesce(pg_catalog.jsonb_agg(compute.offering_json(o) ORDER BY o.shape), '[]')
                  FROM compute.offerings AS o WHERE o.pool_id = p.pool_id))
      FROM compute.tenant_pools(p_tenant_id) AS p WHERE p.pool_id = compute.input_uuid(p_input, 'pool_id');
$$;
COMMENT ON FUNCTION compute.api_pools_get(uuid, jsonb) IS 'pools.get';

CREATE FUNCTION compute.api_pools_update(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_pool compute.pools := compute.pool_get(p_resource_id::uuid);
BEGIN
    PERFORM compute.pool_create(v_pool.site_id, v_pool.name, v_pool.gpu_model, compute.input_text(p_input, 'placement_policy'));
    RETURN (SELECT compute.pool_json(p) FROM compute.pools AS p WHERE p.pool_id = v_pool.pool_id);
END
$$;
COMMENT ON FUNCTION compute.api_pools_update(uuid, text, jsonb) IS 'pools.update (placement policy)';

-- -- offerings ----------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_offerings_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_offering_id uuid;
    v_kind        text := coalesce(compute.input_text(p_input, 'instance_kind', false), 'devices');
BEGIN
    -- A VPS offers whole GPUs with CPU and memory per GPU (sql/700_instances.sql); devices take neither.
    IF v_kind = 'vps' AND (compute.input_text(p_input, 'shape') <> 'gpu' OR compute.input_integer(p_input, 'vcpus_per_atom', false) IS NULL
                           OR compute.input_integer(p_input, 'memory_mib_per_atom', false) IS NULL) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a vps offering is of shape gpu and states vcpus_per_atom and memory_mib_per_atom',
            'Pass shape gpu, vcpus_per_atom and memory_mib_per_atom (what one GPU of the VM brings).');
    ELSIF v_kind = 'devices' AND (p_input ? 'vcpus_per_atom' OR p_input ? 'memory_mib_per_atom') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'only a vps offering states vcpus_per_atom and memory_mib_per_atom',
            'Leave them out, or pass instance_kind vps.');
    END IF;
    -- An offer of a shape the pool already offers changes its limits (and keeps its id).
    v_offering_id := compute.offering_create(compute.input_uuid(p_input, 'pool_id'), compute.input_text(p_input, 'shape'),
        compute.input_integer(p_input, 'max_count'), compute.input_integer(p_input, 'max_duration_seconds') * interval '1 second',
        v_kind, p_resource_id::uuid);
    UPDATE compute.offerings SET vcpus_per_atom = compute.input_integer(p_input, 'vcpus_per_atom', false),
                                 memory_mib_per_atom = compute.input_integer(p_input, 'memory_mib_per_atom', false)
     WHERE offering_id = v_offering_id AND v_kind = 'vps';
    RETURN (SELECT compute.offering_json(o) FROM compute.offerings AS o WHERE o.offering_id = v_offering_id);
END
$$;
COMMENT ON FUNCTION compute.api_offerings_create(uuid, text, jsonb) IS 'offerings.create';

CREATE FUNCTION compute.api_offerings_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.offering_json(o) ORDER BY o.shape), '[]')
      FROM compute.offerings AS o JOIN compute.tenant_pools(p_tenant_id) AS p ON p.pool_id = o.pool_id
     WHERE o.pool_id = compute.input_uuid(p_input, 'pool_id');
$$;
COMMENT ON FUNCTION compute.api_offerings_list(uuid, jsonb) IS 'offerings.list';

-- -- quotas -------------------------------------------------------------------------------------------

CREATE FUNCTION compute.quota_json(p_tenant_id uuid, p_pool_id uuid, p_project_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('pool_id', p_pool_id, 'project_id', p_project_id,
        'max_atoms', q.max_atoms, 'gpu_hours_per_month', q.gpu_hours_per_month, 'updated_at', q.updated_at)
      FROM (SELECT 1) AS one
      LEFT JOIN compute.quotas AS q
        ON q.tenant_id = p_tenant_id AND q.pool_id = p_pool_id AND q.project_id IS NOT DISTINCT FROM p_project_id;
$$;
COMMENT ON FUNCTION compute.quota_json(uuid, uuid, uuid) IS 'A quota as the API answers it (nulls: no limit).';

CREATE FUNCTION compute.api_quotas_set(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_project_id uuid := compute.input_uuid(p_input, 'project_id', false);
    v_hours      jsonb := compute.request_field(p_input, 'gpu_hours_per_month', 'number', false);
BEGIN
    PERFORM compute.quota_set(p_tenant_id, v_project_id, p_resource_id::uuid, compute.input_integer(p_input, 'max_atoms', false),
                              (v_hours #>> '{}')::numeric);
    RETURN compute.quota_json(p_tenant_id, p_resource_id::uuid, v_project_id);
END
$$;
COMMENT ON FUNCTION compute.api_quotas_set(uuid, text, jsonb) IS 'quotas.set';

CREATE FUNCTION compute.api_quotas_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_project_id uuid := compute.input_uuid(p_input, 'project_id', false);
BEGIN
    PERFORM compute.project_check(p_tenant_id, v_project_id);
    RETURN (SELECT compute.quota_json(p_tenant_id, p.pool_id, v_project_id)
              FROM compute.tenant_pools(p_tenant_id) AS p WHERE p.pool_id = compute.input_uuid(p_input, 'pool_id'));
END
$$;
COMMENT ON FUNCTION compute.api_quotas_get(uuid, jsonb) IS 'quotas.get';

-- -- projects -----------------------------------------------------------------------------------------

CREATE FUNCTION compute.project_json(p_project compute.projects)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('project_id', p_project.project_id, 'name', p_project.name, 'created_at', p_project.created_at);
$$;
COMMENT ON FUNCTION compute.project_json(compute.projects) IS 'A project as the API answers it.';

CREATE FUNCTION compute.api_projects_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
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

CREATE FUNCTION compute.api_projects_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.project_json(p) ORDER BY p.name), '[]')
      FROM (SELECT * FROM compute.projects AS p WHERE p.tenant_id = p_tenant_id ORDER BY p.name
             LIMIT compute.list_limit(p_input)) AS p;
$$;
COMMENT ON FUNCTION compute.api_projects_list(uuid, jsonb) IS 'projects.list';

-- -- nodes --------------------------------------------------------------------------------------------

CREATE FUNCTION compute.api_nodes_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.node_json(n.node_id) ORDER BY n.name), '[]')
      FROM (SELECT n.* FROM compute.nodes AS n JOIN compute.tenant_pools(p_tenant_id) AS p ON p.pool_id = n.pool_id
             WHERE n.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), n.pool_id)
             ORDER BY n.name LIMIT compute.list_limit(p_input)) AS n;
$$;
COMMENT ON FUNCTION compute.api_nodes_list(uuid, jsonb) IS 'nodes.list';

CREATE FUNCTION compute.api_nodes_get(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.node_json(n.node_id)
      FROM compute.nodes AS n JOIN compute.tenant_pools(p_tenant_id) AS p ON p.pool_id = n.pool_id
     WHERE n.node_id = compute.input_uuid(p_input, 'node_id');
$$;
COMMENT ON FUNCTION compute.api_nodes_get(uuid, jsonb) IS 'nodes.get';

CREATE FUNCTION compute.api_node_flag(p_node_id uuid, p_flag text, p_set boolean, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    -- Who set it: the admission's principal (api.admit sets bc.principal for its transaction).
    IF p_set THEN
        PERFORM compute.node_flag_set(p_node_id, p_flag, coalesce(pg_catalog.current_setting('bc.principal', true), 'api'),
                                      compute.input_text(p_input, 'reason'));
    ELSE
        PERFORM compute.node_flag_clear(p_node_id, p_flag);
    END IF;
    RETURN compute.node_json(p_node_id);
END
$$;
COMMENT ON FUNCTION compute.api_node_flag(uuid, text, boolean, jsonb) IS 'Set or clear a node flag for the API; answers the node.';

CREATE FUNCTION compute.api_nodes_cordon(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.api_node_flag(p_resource_id::uuid, 'cordoned', true, p_input); $$;
COMMENT ON FUNCTION compute.api_nodes_cordon(uuid, text, jsonb) IS 'nodes.cordon';

CREATE FUNCTION compute.api_nodes_uncordon(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.api_node_flag(p_resource_id::uuid, 'cordoned', false, p_input); $$;
COMMENT ON FUNCTION compute.api_nodes_uncordon(uuid, text, jsonb) IS 'nodes.uncordon';

CREATE FUNCTION compute.api_nodes_drain(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.api_node_flag(p_resource_id::uuid, 'draining', true, p_input); $$;
COMMENT ON FUNCTION compute.api_nodes_drain(uuid, text, jsonb) IS 'nodes.drain';

CREATE FUNCTION compute.api_nodes_quarantine(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.api_node_flag(p_resource_id::uuid, 'quarantined', true, p_input); $$;
COMMENT ON FUNCTION compute.api_nodes_quarantine(uuid, text, jsonb) IS 'nodes.quarantine';

CREATE FUNCTION compute.api_nodes_unquarantine(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.api_node_flag(p_resource_id::uuid, 'quarantined', false, p_input); $$;
COMMENT ON FUNCTION compute.api_nodes_unquarantine(uuid, text, jsonb) IS 'nodes.unquarantine';
