-- Deploy better_compute:fleet to pg
-- Snapshot of sql/110_fleet.sql when this change was planned.

BEGIN;

-- The fleet (DESIGN §5): sites, pools, nodes, node flags and devices.
--   site   a location / network domain
--   pool   one site, exactly one GPU model; the scheduling and policy domain (pack or spread)
--   node   one server in one pool; its last inventory document is kept whole (unknown fields too)
--   device a physical GPU of a node
-- Nodes never change pool; devices never change node (their uuid is the GPU's own).
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.sites (
    site_id    uuid PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.sites IS 'A location or network domain.';

CREATE TABLE compute.pools (
    pool_id          uuid PRIMARY KEY,
    site_id          uuid NOT NULL REFERENCES compute.sites,
    name             text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    gpu_model        text NOT NULL CHECK (length(gpu_model) BETWEEN 1 AND 200),
    placement_policy text NOT NULL DEFAULT 'pack' CHECK (placement_policy IN ('pack', 'spread')),
    created_at       timestamptz NOT NULL,
    UNIQUE (site_id, name),
    UNIQUE (pool_id, site_id)
);
COMMENT ON TABLE compute.pools IS 'One site, exactly one GPU model; pack fills partly used nodes first, spread the emptiest.';

CREATE TABLE compute.nodes (
    node_id      uuid PRIMARY KEY,
    site_id      uuid NOT NULL,
    pool_id      uuid NOT NULL,
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$'),
    rank         bigint GENERATED ALWAYS AS IDENTITY,  -- stable order for placement tie-breaks
    inventory    jsonb NOT NULL,
    inventory_at timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    FOREIGN KEY (pool_id, site_id) REFERENCES compute.pools (pool_id, site_id),
    UNIQUE (site_id, name),
    UNIQUE (node_id, site_id)
);
CREATE INDEX nodes_pool ON compute.nodes (pool_id);
COMMENT ON TABLE compute.nodes IS 'One server; inventory is the last accepted inventory document (docs/inventory.md).';

CREATE TABLE compute.node_flags (
    node_id      uuid NOT NULL REFERENCES compute.nodes ON DELETE CASCADE,
    flag         text NOT NULL CHECK (flag IN ('cordoned', 'draining', 'quarantined')),
    set_by       text NOT NULL,
    reason       text NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    set_at       timestamptz NOT NULL,
    completed_at timestamptz CHECK (completed_at IS NULL OR flag = 'draining'),
    PRIMARY KEY (node_id, flag)
);
COMMENT ON TABLE compute.node_flags IS 'A node with any flag gets no new placements. Draining also waits for its current bookings to end.';

CREATE TABLE compute.devices (
    device_id     uuid PRIMARY KEY,
    site_id       uuid NOT NULL,
    node_id       uuid NOT NULL,
    uuid          text NOT NULL UNIQUE CHECK (length(uuid) BETWEEN 1 AND 100),
    index         integer NOT NULL CHECK (index >= 0),
    pci_bus_id    text NOT NULL CHECK (length(pci_bus_id) BETWEEN 1 AND 64),
    model         text NOT NULL,
    memory_mib    integer NOT NULL CHECK (memory_mib > 0),
    numa_node     integer,
    nvlink_peers  text[] NOT NULL DEFAULT '{}',
    mig_supported boolean NOT NULL DEFAULT false,
    mig_profiles  jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(mig_profiles) = 'array'),
    layout        text NOT NULL DEFAULT 'whole',
    layout_since  timestamptz NOT NULL,
    present       boolean NOT NULL DEFAULT true,
    FOREIGN KEY (node_id, site_id) REFERENCES compute.nodes (node_id, site_id),
    UNIQUE (device_id, site_id)
);
CREATE INDEX devices_node ON compute.devices (node_id, index);
COMMENT ON TABLE compute.devices IS 'A physical GPU. layout (whole | timeslice:N | mig:profile@placement,...) decides its atoms; present=false when the last inventory lacked it.';
COMMENT ON COLUMN compute.devices.mig_profiles IS 'MIG profiles as the GPU reports them: name, id, slices (memory slices of 8), memory_mib, sm, placements.';

CREATE FUNCTION compute.site_create(p_name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_site_id uuid;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid site name %L', p_name),
            'Use 1-63 characters: lower-case letters, digits, ".", "_" or "-", starting with a letter or digit.');
    END IF;
    INSERT INTO compute.sites (site_id, name, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_name, compute.compute_now())
    ON CONFLICT (name) DO NOTHING
    RETURNING site_id INTO v_site_id;
    RETURN coalesce(v_site_id, (SELECT s.site_id FROM compute.sites AS s WHERE s.name = p_name));
END
$$;
COMMENT ON FUNCTION compute.site_create(text) IS 'Create a site, or return the existing one of that name.';

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
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid pool name %L', p_name),
            'Use 1-63 characters: lower-case letters, digits, ".", "_" or "-", starting with a letter or digit.');
    END IF;
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

COMMIT;
