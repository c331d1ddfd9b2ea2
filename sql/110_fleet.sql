-- The fleet (docs/architecture.md §5): sites, pools, nodes, node flags, node sessions and devices.
--   site   a location / network domain
--   pool   one site, exactly one GPU model; the scheduling and policy domain (pack or spread)
--   node   one server in one pool; its last inventory document is kept whole (unknown fields too)
--   device a physical GPU of a node
-- Nodes never change pool; devices never change node (their uuid is the GPU's own).
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.sites (
    site_id    uuid CONSTRAINT sites_pkey PRIMARY KEY,
    name       text NOT NULL CONSTRAINT sites_name_check CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    created_at timestamptz NOT NULL,
    tenant_id  uuid CONSTRAINT sites_tenant_id_fkey REFERENCES compute.tenants,
    CONSTRAINT sites_tenant_id_name_key UNIQUE NULLS NOT DISTINCT (tenant_id, name)
);
COMMENT ON TABLE compute.sites IS 'A location or network domain.';
COMMENT ON COLUMN compute.sites.tenant_id IS 'The tenant that owns the site, its pools and nodes; NULL: an operator''s site, reachable through ops only.';

CREATE TABLE compute.pools (
    pool_id          uuid CONSTRAINT pools_pkey PRIMARY KEY,
    site_id          uuid NOT NULL CONSTRAINT pools_site_id_fkey REFERENCES compute.sites,
    name             text NOT NULL CONSTRAINT pools_name_check CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    gpu_model        text NOT NULL CONSTRAINT pools_gpu_model_check CHECK (length(gpu_model) BETWEEN 1 AND 200),
    placement_policy text NOT NULL DEFAULT 'pack' CONSTRAINT pools_placement_policy_check CHECK (placement_policy IN ('pack', 'spread')),
    created_at       timestamptz NOT NULL,
    CONSTRAINT pools_site_id_name_key UNIQUE (site_id, name),
    CONSTRAINT pools_pool_id_site_id_key UNIQUE (pool_id, site_id)
);
COMMENT ON TABLE compute.pools IS 'One site, exactly one GPU model; pack fills partly used nodes first, spread the emptiest.';

CREATE TABLE compute.nodes (
    node_id      uuid CONSTRAINT nodes_pkey PRIMARY KEY,
    site_id      uuid NOT NULL,
    pool_id      uuid NOT NULL,
    name         text NOT NULL CONSTRAINT nodes_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$'),
    rank         bigint GENERATED ALWAYS AS IDENTITY,  -- stable order for placement tie-breaks
    inventory    jsonb NOT NULL,
    inventory_at timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    CONSTRAINT nodes_pool_id_site_id_fkey FOREIGN KEY (pool_id, site_id) REFERENCES compute.pools (pool_id, site_id),
    CONSTRAINT nodes_site_id_name_key UNIQUE (site_id, name),
    CONSTRAINT nodes_node_id_site_id_key UNIQUE (node_id, site_id)
);
CREATE INDEX nodes_pool ON compute.nodes (pool_id);
COMMENT ON TABLE compute.nodes IS 'One server; inventory is the last accepted inventory document (docs/inventory.md).';

CREATE TABLE compute.node_flags (
    node_id      uuid NOT NULL CONSTRAINT node_flags_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    flag         text NOT NULL CONSTRAINT node_flags_flag_check CHECK (flag IN ('cordoned', 'draining', 'quarantined')),
    set_by       text NOT NULL,
    reason       text NOT NULL CONSTRAINT node_flags_reason_check CHECK (length(reason) BETWEEN 1 AND 1000),
    set_at       timestamptz NOT NULL,
    completed_at timestamptz CONSTRAINT node_flags_completed_only_when_draining CHECK (completed_at IS NULL OR flag = 'draining'),
    CONSTRAINT node_flags_pkey PRIMARY KEY (node_id, flag)
);
COMMENT ON TABLE compute.node_flags IS 'A node with any flag gets no new placements. Draining also waits for its current bookings to end.';

CREATE TABLE compute.node_sessions (
    node_id       uuid CONSTRAINT node_sessions_pkey PRIMARY KEY CONSTRAINT node_sessions_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    epoch         bigint NOT NULL CONSTRAINT node_sessions_epoch_check CHECK (epoch > 0),
    gateway       text NOT NULL CONSTRAINT node_sessions_gateway_check CHECK (length(gateway) BETWEEN 1 AND 200),
    opened_at     timestamptz NOT NULL,
    last_heard_at timestamptz NOT NULL,
    closed_at     timestamptz
);
COMMENT ON TABLE compute.node_sessions IS 'The current session of each node: its epoch (fencing token), gateway, when last heard.';

CREATE TABLE compute.devices (
    device_id     uuid CONSTRAINT devices_pkey PRIMARY KEY,
    site_id       uuid NOT NULL,
    node_id       uuid NOT NULL,
    uuid          text NOT NULL CONSTRAINT devices_uuid_key UNIQUE CONSTRAINT devices_uuid_check CHECK (length(uuid) BETWEEN 1 AND 100),
    index         integer NOT NULL CONSTRAINT devices_index_check CHECK (index >= 0),
    pci_bus_id    text NOT NULL CONSTRAINT devices_pci_bus_id_check CHECK (length(pci_bus_id) BETWEEN 1 AND 64),
    model         text NOT NULL,
    memory_mib    integer NOT NULL CONSTRAINT devices_memory_mib_check CHECK (memory_mib > 0),
    numa_node     integer,
    nvlink_peers  text[] NOT NULL DEFAULT '{}',
    mig_supported boolean NOT NULL DEFAULT false,
    mig_profiles  jsonb NOT NULL DEFAULT '[]' CONSTRAINT devices_mig_profiles_check CHECK (jsonb_typeof(mig_profiles) = 'array'),
    layout        text NOT NULL DEFAULT 'whole',
    layout_since  timestamptz NOT NULL,
    present       boolean NOT NULL DEFAULT true,
    CONSTRAINT devices_node_id_site_id_fkey FOREIGN KEY (node_id, site_id) REFERENCES compute.nodes (node_id, site_id),
    CONSTRAINT devices_device_id_site_id_key UNIQUE (device_id, site_id)
);
CREATE INDEX devices_node ON compute.devices (node_id, index);
CREATE INDEX devices_absent ON compute.devices (device_id) WHERE NOT present;
COMMENT ON TABLE compute.devices IS 'A physical GPU. layout (whole | timeslice:N | mig:profile@placement,...) decides its atoms; present=false when the last inventory lacked it.';
COMMENT ON COLUMN compute.devices.mig_profiles IS 'MIG profiles as the GPU reports them: name, id, slices (memory slices of 8), memory_mib, sm, placements.';

CREATE FUNCTION compute.pool_get(p_pool_id uuid)
RETURNS compute.pools
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_pool compute.pools;
BEGIN
    SELECT * INTO v_pool FROM compute.pools AS p WHERE p.pool_id = p_pool_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id),
            'List the pools in ops.pool_capacity, or create one with compute.pool_create.');
    END IF;
    RETURN v_pool;
END
$$;
COMMENT ON FUNCTION compute.pool_get(uuid) IS 'The pool, or NOT_FOUND.';

CREATE FUNCTION compute.node_get(p_node_id uuid)
RETURNS compute.nodes
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_node compute.nodes;
BEGIN
    SELECT * INTO v_node FROM compute.nodes AS n WHERE n.node_id = p_node_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %s', p_node_id), 'List the nodes in ops.nodes.');
    END IF;
    RETURN v_node;
END
$$;
COMMENT ON FUNCTION compute.node_get(uuid) IS 'The node, or NOT_FOUND.';

CREATE FUNCTION compute.site_create(p_name text, p_tenant_id uuid DEFAULT NULL, p_site_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_site_id uuid;
BEGIN
    PERFORM compute.require_name('site', p_name);
    IF p_tenant_id IS NOT NULL THEN
        PERFORM compute.tenant_ensure(p_tenant_id);
    END IF;
    INSERT INTO compute.sites (site_id, name, created_at, tenant_id)
    VALUES (coalesce(p_site_id, pg_catalog.gen_random_uuid()), p_name, compute.compute_now(), p_tenant_id)
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING site_id INTO v_site_id;
    RETURN coalesce(v_site_id, (SELECT s.site_id FROM compute.sites AS s
                                 WHERE s.name = p_name AND s.tenant_id IS NOT DISTINCT FROM p_tenant_id));
END
$$;
COMMENT ON FUNCTION compute.site_create(text, uuid, uuid) IS 'Create a site (of a tenant, or an operator''s without one), or return the existing one of that name.';

CREATE FUNCTION compute.pool_create(p_site_id uuid, p_name text, p_gpu_model text, p_placement_policy text DEFAULT 'pack',
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
