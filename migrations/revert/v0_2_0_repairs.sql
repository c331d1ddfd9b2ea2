-- Revert better_compute:v0_2_0_repairs from pg
-- Back to @v0.2.0 as released: the definitions of its scripts, its indexes and limits.

BEGIN;

SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('capacity_search_checks', 500, 'count', 'Candidate start times capacity_earliest tries.');

DROP INDEX compute.bookings_tenant_pool;
CREATE INDEX bookings_tenant_pool ON compute.bookings USING gist (tenant_id, pool_id, during)
    WHERE state IN ('provisional', 'active', 'released');
DROP INDEX compute.devices_absent;

-- clock
CREATE OR REPLACE FUNCTION compute.compute_now()
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN (SELECT c.pin_allowed FROM compute.clock_control AS c)
        THEN coalesce(nullif(pg_catalog.current_setting('bc.now', true), '')::timestamptz, pg_catalog.now())
             + coalesce(nullif(pg_catalog.current_setting('bc.now_offset', true), '')::interval, interval '0')
        ELSE pg_catalog.now()
    END
$$;

-- tenancy
CREATE OR REPLACE FUNCTION compute.tenant_ensure(p_tenant_id uuid, p_name text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tenant_id IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'tenant_id is required', 'Pass the Better IAM tenant id.');
    END IF;
    INSERT INTO compute.tenants AS t (tenant_id, name, created_at)
    VALUES (p_tenant_id, coalesce(p_name, p_tenant_id::text), compute.compute_now())
    ON CONFLICT (tenant_id) DO UPDATE SET name = coalesce(p_name, t.name)
        WHERE p_name IS NOT NULL AND t.name IS DISTINCT FROM p_name;
    RETURN p_tenant_id;
END
$$;

CREATE OR REPLACE FUNCTION compute.project_create(p_tenant_id uuid, p_name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_project_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid project name %L', p_name),
            'Use 1-63 characters: lower-case letters, digits, ".", "_" or "-", starting with a letter or digit.');
    END IF;
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

-- fleet
CREATE OR REPLACE FUNCTION compute.site_create(p_name text)
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

CREATE OR REPLACE FUNCTION compute.pool_create(p_site_id uuid, p_name text, p_gpu_model text, p_placement_policy text DEFAULT 'pack')
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

-- atoms
CREATE OR REPLACE FUNCTION compute.device_set_layout(p_device_id uuid, p_layout text, p_at timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: the device row (FOR UPDATE) first, as placement and extension do; then its atoms.
DECLARE
    v_at       timestamptz := coalesce(p_at, compute.compute_now());
    v_device   compute.devices;
    v_blocking text;
    v_changed  integer := 0;
    v_count    integer;
BEGIN
    SELECT * INTO v_device FROM compute.devices AS d WHERE d.device_id = p_device_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no device %s', p_device_id), 'List devices in ops.atom_holders.');
    END IF;
    IF v_at < compute.compute_now() THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a layout change cannot be scheduled in the past',
            'Omit the time to change now, or pass a future time.');
    END IF;

    CREATE TEMP TABLE IF NOT EXISTS pg_temp.layout_next (kind text, profile text, placement integer, slot integer,
        slot_count integer, slices int4range, shares int4range, gpu_fraction numeric) ON COMMIT DROP;
    DELETE FROM pg_temp.layout_next;
    INSERT INTO pg_temp.layout_next SELECT * FROM compute.layout_atoms(p_device_id, p_layout);

    -- Refuse: a live booking of an atom that goes away overlaps the change time or comes after it.
    SELECT pg_catalog.string_agg(DISTINCT b.reservation_id::text, ', ') INTO v_blocking
      FROM compute.atoms AS a
      JOIN compute.bookings AS b ON b.atom_id = a.atom_id AND b.state IN ('provisional', 'active')
     WHERE a.device_id = p_device_id AND a.valid && tstzrange(v_at, NULL)
       AND b.during && tstzrange(v_at, NULL)
       AND NOT EXISTS (SELECT 1 FROM pg_temp.layout_next AS n
                        WHERE (n.kind, n.profile, n.placement, n.slot, n.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    IF v_blocking IS NOT NULL THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('layout %s of GPU %s cannot start at %s: atoms that go away are booked', p_layout, v_device.uuid, v_at),
            pg_catalog.format('Release or wait for reservations %s, or schedule the change after they end.', v_blocking));
    END IF;

    -- Atoms that go away: never valid if they had not started by then, else valid until v_at.
    DELETE FROM compute.atoms AS a
     WHERE a.device_id = p_device_id AND lower(a.valid) >= v_at
       AND NOT EXISTS (SELECT 1 FROM pg_temp.layout_next AS n
                        WHERE (n.kind, n.profile, n.placement, n.slot, n.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count))
       AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.atom_id = a.atom_id);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;
    UPDATE compute.atoms AS a SET valid = tstzrange(lower(a.valid), v_at)
     WHERE a.device_id = p_device_id AND a.valid @> v_at AND lower(a.valid) < v_at
       AND NOT EXISTS (SELECT 1 FROM pg_temp.layout_next AS n
                        WHERE (n.kind, n.profile, n.placement, n.slot, n.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    -- Atoms that stay keep their rows (and bookings), valid from v_at at the latest; new ones start at v_at.
    UPDATE compute.atoms AS a SET valid = tstzrange(v_at, upper(a.valid))
     WHERE a.device_id = p_device_id AND lower(a.valid) > v_at
       AND EXISTS (SELECT 1 FROM pg_temp.layout_next AS n
                    WHERE (n.kind, n.profile, n.placement, n.slot, n.slot_count)
                          IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    INSERT INTO compute.atoms (atom_id, site_id, pool_id, node_id, device_id, node_rank, device_index, kind, profile,
                               placement, slot, slot_count, slices, shares, gpu_fraction, valid)
    SELECT pg_catalog.gen_random_uuid(), v_device.site_id, n.pool_id, v_device.node_id, p_device_id, n.rank,
           v_device.index, l.kind, l.profile, l.placement, l.slot, l.slot_count, l.slices, l.shares, l.gpu_fraction,
           tstzrange(v_at, NULL)
      FROM pg_temp.layout_next AS l
      JOIN compute.nodes AS n ON n.node_id = v_device.node_id
     WHERE NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                        WHERE a.device_id = p_device_id AND a.valid && tstzrange(v_at, NULL)
                          AND (l.kind, l.profile, l.placement, l.slot, l.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    UPDATE compute.devices SET layout = p_layout, layout_since = v_at WHERE device_id = p_device_id;
    RETURN v_changed;
END
$$;

-- inventory
CREATE OR REPLACE FUNCTION compute.inventory_require(p_doc jsonb, p_path text, p_field text, p_type text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_doc -> p_field IS NULL OR pg_catalog.jsonb_typeof(p_doc -> p_field) <> p_type THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('inventory field %s%s is missing or not a %s', p_path, p_field, p_type),
            'See docs/inventory.md for the inventory document.');
    END IF;
    RETURN p_doc -> p_field;
END
$$;

CREATE OR REPLACE FUNCTION compute.node_register(p_pool_id uuid, p_name text, p_inventory jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
-- Lock order: the pool (FOR SHARE), the node (FOR UPDATE), then its devices.
DECLARE
    v_pool    compute.pools;
    v_node    compute.nodes;
    v_now     timestamptz := compute.compute_now();
    v_device  jsonb;
    v_known   compute.devices;
    v_new_id  uuid;
    v_wrong   jsonb;
BEGIN
    -- Validate the document and the pool's GPU model.
    PERFORM compute.inventory_validate(p_inventory);
    SELECT * INTO v_pool FROM compute.pools AS p WHERE p.pool_id = p_pool_id FOR SHARE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Register the node into an existing pool.');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid node name %L', p_name),
            'Use the host name: letters, digits, ".", "_" or "-".');
    END IF;
    SELECT d INTO v_wrong FROM pg_catalog.jsonb_array_elements(p_inventory -> 'devices') AS d
     WHERE d ->> 'model' <> v_pool.gpu_model LIMIT 1;
    IF v_wrong IS NOT NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('node %s has a %s (GPU %s) but pool %s takes %s only', p_name, v_wrong ->> 'model',
                              v_wrong ->> 'index', v_pool.name, v_pool.gpu_model),
            'Register the node into a pool of its GPU model.');
    END IF;

    -- The node: created, or its inventory replaced.
    SELECT * INTO v_node FROM compute.nodes AS n WHERE n.site_id = v_pool.site_id AND n.name = p_name FOR UPDATE;
    IF FOUND AND v_node.pool_id <> p_pool_id THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('node %s belongs to another pool', p_name),
            'A node never changes pool: register it under its own pool.');
    ELSIF FOUND THEN
        UPDATE compute.nodes SET inventory = p_inventory, inventory_at = v_now WHERE node_id = v_node.node_id;
    ELSE
        INSERT INTO compute.nodes (node_id, site_id, pool_id, name, inventory, inventory_at, created_at)
        VALUES (pg_catalog.gen_random_uuid(), v_pool.site_id, p_pool_id, p_name, p_inventory, v_now, v_now)
        RETURNING * INTO v_node;
    END IF;

    -- Its devices: known ones updated, new ones created with their atoms, missing ones marked absent.
    FOR v_device IN SELECT d FROM pg_catalog.jsonb_array_elements(p_inventory -> 'devices') AS d ORDER BY (d ->> 'index')::integer LOOP
        SELECT * INTO v_known FROM compute.devices AS d WHERE d.uuid = v_device ->> 'uuid' FOR UPDATE;
        IF FOUND AND v_known.node_id <> v_node.node_id THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT',
                pg_catalog.format('GPU %s is registered on another node', v_device ->> 'uuid'),
                'A GPU moved between servers must be removed from its old node first.');
        END IF;
        INSERT INTO compute.devices AS d (device_id, site_id, node_id, uuid, index, pci_bus_id, model, memory_mib, numa_node,
                                          nvlink_peers, mig_supported, mig_profiles, layout, layout_since, present)
        VALUES (coalesce(v_known.device_id, pg_catalog.gen_random_uuid()), v_pool.site_id, v_node.node_id,
                v_device ->> 'uuid', (v_device ->> 'index')::integer, v_device ->> 'pci_bus_id', v_device ->> 'model',
                (v_device ->> 'memory_mib')::integer, (v_device ->> 'numa_node')::integer,
                coalesce(ARRAY(SELECT pg_catalog.jsonb_array_elements_text(v_device -> 'nvlink_peers')), '{}'),
                coalesce((v_device #>> '{mig,supported}')::boolean, false), coalesce(v_device #> '{mig,profiles}', '[]'),
                compute.inventory_layout(v_device), v_now, true)
        ON CONFLICT (uuid) DO UPDATE
            SET index = EXCLUDED.index, pci_bus_id = EXCLUDED.pci_bus_id, memory_mib = EXCLUDED.memory_mib,
                numa_node = EXCLUDED.numa_node, nvlink_peers = EXCLUDED.nvlink_peers,
                mig_supported = EXCLUDED.mig_supported, mig_profiles = EXCLUDED.mig_profiles, present = true
        RETURNING d.device_id INTO v_new_id;
        IF v_known.device_id IS NULL THEN
            PERFORM compute.device_set_layout(v_new_id, compute.inventory_layout(v_device), v_now);
        END IF;
    END LOOP;
    UPDATE compute.devices SET present = false
     WHERE node_id = v_node.node_id AND present
       AND uuid NOT IN (SELECT d ->> 'uuid' FROM pg_catalog.jsonb_array_elements(p_inventory -> 'devices') AS d);
    RETURN v_node.node_id;
END
$$;

-- offerings_quotas
CREATE OR REPLACE FUNCTION compute.offering_create(p_pool_id uuid, p_shape text, p_max_count integer, p_max_duration interval,
                                        p_instance_kind text DEFAULT 'devices')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_offering_id uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Create the pool first.');
    END IF;
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

CREATE OR REPLACE FUNCTION compute.quota_set(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_max_atoms integer,
                                  p_gpu_hours_per_month numeric)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_quota_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Create the pool first.');
    END IF;
    IF p_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = p_project_id AND p.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in tenant %s', p_project_id, p_tenant_id),
            'Create the project in that tenant first.');
    END IF;
    IF p_max_atoms < 0 OR p_gpu_hours_per_month < 0 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a quota cannot be negative', 'Use 0 to forbid, NULL for no limit.');
    END IF;
    INSERT INTO compute.quotas AS q (quota_id, tenant_id, project_id, pool_id, max_atoms, gpu_hours_per_month, updated_at)
    VALUES (pg_catalog.gen_random_uuid(), p_tenant_id, p_project_id, p_pool_id, p_max_atoms, p_gpu_hours_per_month,
            compute.compute_now())
    ON CONFLICT (tenant_id, project_id, pool_id) DO UPDATE
        SET max_atoms = EXCLUDED.max_atoms, gpu_hours_per_month = EXCLUDED.gpu_hours_per_month, updated_at = EXCLUDED.updated_at
    RETURNING q.quota_id INTO v_quota_id;
    RETURN v_quota_id;
END
$$;

-- placement
CREATE OR REPLACE FUNCTION compute.atom_is_free(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM compute.bookings AS b
         WHERE b.site_id = p_atom.site_id AND b.device_id = p_atom.device_id
           AND b.slices && p_atom.slices AND b.shares && p_atom.shares AND b.during && p_during
           AND b.state IN ('provisional', 'active'))
$$;

CREATE OR REPLACE FUNCTION compute.atom_is_schedulable(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_atom.valid @> p_during
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_atom.node_id)
       AND EXISTS (SELECT 1 FROM compute.devices AS d WHERE d.device_id = p_atom.device_id AND d.present)
$$;

CREATE OR REPLACE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean,
                                         p_skip uuid[], p_limit bigint)
RETURNS compute.placement_candidate[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atoms_pack_order, atoms_spread_order).
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)
                 ORDER BY a.pool_id, a.shape, a.device_index, a.node_rank, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$$;

CREATE OR REPLACE FUNCTION compute.place_choose(p_candidates compute.placement_candidate[], p_count integer, p_during tstzrange,
                                     p_pack boolean, p_same_node boolean)
RETURNS uuid[]
LANGUAGE sql STABLE
AS $$
    WITH c AS (
        SELECT x.*,
               (SELECT count(*) FROM pg_catalog.unnest(p_candidates) AS y
                 WHERE y.node_id = x.node_id AND y.device_id <> x.device_id AND y.device_uuid = ANY (x.nvlink_peers)) AS peer_score
          FROM pg_catalog.unnest(p_candidates) AS x
    ), nodes AS (
        SELECT c.node_id, count(*) AS free, min(c.node_rank) AS rank,
               (SELECT count(*) FROM compute.bookings AS b
                 WHERE b.node_id = c.node_id AND b.during && p_during AND b.state IN ('provisional', 'active')) AS used
          FROM c GROUP BY c.node_id
    ), ordered_nodes AS (
        SELECT n.node_id, n.free,
               row_number() OVER (ORDER BY n.free >= p_count DESC,                      -- one node that fits, if any
                                           CASE WHEN n.free >= p_count THEN 0 ELSE -n.free END,  -- else fewest nodes
                                           CASE WHEN p_pack THEN -n.used ELSE n.used END,        -- pack or spread
                                           n.rank) AS node_order
          FROM nodes AS n
    ), picked AS (
        SELECT c.atom_id, o.node_order, o.free,
               row_number() OVER (ORDER BY o.node_order, c.peer_score DESC, c.device_index, c.slice0, c.slot) AS k
          FROM c JOIN ordered_nodes AS o USING (node_id)
    )
    SELECT CASE
        WHEN (SELECT count(*) FROM picked WHERE k <= p_count) < p_count THEN NULL
        WHEN p_same_node AND (SELECT max(node_order) FROM picked WHERE k <= p_count) > 1 THEN NULL
        ELSE (SELECT pg_catalog.array_agg(atom_id ORDER BY k) FROM picked WHERE k <= p_count)
    END
$$;

CREATE OR REPLACE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
-- Lock order: the chosen devices, FOR UPDATE SKIP LOCKED, in device_id order (never waits).
DECLARE
    v_pack       boolean;
    v_skip       uuid[] := '{}';
    v_candidates compute.placement_candidate[];
    v_chosen     uuid[];
    v_devices    uuid[];
    v_locked     uuid[];
    v_attempt    integer;
BEGIN
    SELECT p.placement_policy = 'pack' INTO v_pack FROM compute.pools AS p WHERE p.pool_id = p_pool_id;
    IF v_pack IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Pass an existing pool.');
    END IF;
    FOR v_attempt IN 1..3 LOOP
        -- 1-2. candidates and choice.
        v_candidates := compute.place_candidates(p_pool_id, p_shape, p_during, NOT v_pack, v_skip,
                                                 greatest(compute.limit('placement_candidates'), p_count));
        v_chosen := compute.place_choose(v_candidates, p_count, p_during, v_pack, p_same_node);
        EXIT WHEN v_chosen IS NULL;
        SELECT pg_catalog.array_agg(DISTINCT a.device_id) INTO v_devices FROM compute.atoms AS a WHERE a.atom_id = ANY (v_chosen);

        -- 3. lock the devices; a device a concurrent placement holds is skipped, never waited for.
        SELECT pg_catalog.array_agg(l.device_id) INTO v_locked
          FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                 ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;

        -- 4. recheck with this statement's fresh snapshot.
        IF pg_catalog.cardinality(v_locked) = pg_catalog.cardinality(v_devices)
           AND NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                            WHERE a.atom_id = ANY (v_chosen)
                              AND NOT (compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during))) THEN
            RETURN v_chosen;
        END IF;
        v_skip := v_skip || v_devices;
    END LOOP;
    PERFORM compute.raise_error('CAPACITY_CONFLICT',
        pg_catalog.format('cannot place %s x %s in pool %s during %s', p_count, p_shape, p_pool_id, p_during),
        compute.place_shortfall(p_pool_id, p_shape, p_count, p_during, p_same_node));
END
$$;

-- quota
CREATE OR REPLACE FUNCTION compute.month_hours(p_during tstzrange, p_month_start timestamptz)
RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $$
    -- Hours of p_during inside the calendar month starting at p_month_start (UTC).
    SELECT coalesce(extract(epoch FROM upper(r) - lower(r)) / 3600, 0)
      FROM (SELECT p_during * tstzrange(p_month_start, (p_month_start AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC') AS r) AS x
     WHERE NOT isempty(r)
    UNION ALL SELECT 0
    LIMIT 1
$$;

CREATE OR REPLACE FUNCTION compute.quota_check(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_during tstzrange,
                                    p_atoms integer, p_gpu_fraction numeric, p_excluding uuid DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: quota rows FOR UPDATE in quota_id order (before any device lock).
DECLARE
    v_quota compute.quotas;
    v_scope text;
    v_peak  bigint;
    v_month timestamptz;
    v_used  numeric;
    v_asked numeric;
BEGIN
    FOR v_quota IN
        SELECT * FROM compute.quotas AS q
         WHERE q.tenant_id = p_tenant_id AND q.pool_id = p_pool_id
           AND (q.project_id IS NULL OR q.project_id = p_project_id)
         ORDER BY q.quota_id
           FOR UPDATE
    LOOP
        v_scope := CASE WHEN v_quota.project_id IS NULL THEN 'tenant' ELSE 'project' END;

        -- Concurrent atoms: the peak is reached at the window's start or at a booking's start within it.
        IF v_quota.max_atoms IS NOT NULL THEN
            SELECT coalesce(max(held), 0) INTO v_peak
              FROM (SELECT t, (SELECT count(*) FROM compute.bookings AS b
                                WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                                  AND b.state IN ('provisional', 'active') AND b.during @> t
                                  AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                                  AND b.reservation_id IS DISTINCT FROM p_excluding) AS held
                      FROM (SELECT lower(p_during) AS t
                            UNION
                            SELECT lower(b.during) FROM compute.bookings AS b
                             WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                               AND b.state IN ('provisional', 'active') AND b.during && p_during
                               AND p_during @> lower(b.during)) AS instants) AS counts;
            IF v_peak + p_atoms > v_quota.max_atoms THEN
                PERFORM compute.raise_error('QUOTA_EXCEEDED',
                    pg_catalog.format('%s quota of %s concurrent atoms in this pool would be exceeded', v_scope, v_quota.max_atoms),
                    pg_catalog.format('%s atoms remain during the window (%s held at the peak, %s asked); release some or ask for fewer.',
                                      greatest(v_quota.max_atoms - v_peak, 0), v_peak, p_atoms));
            END IF;
        END IF;

        -- GPU-hours per calendar month, for each month the window touches.
        IF v_quota.gpu_hours_per_month IS NOT NULL THEN
            FOR v_month IN
                SELECT m AT TIME ZONE 'UTC'
                  FROM pg_catalog.generate_series(date_trunc('month', lower(p_during) AT TIME ZONE 'UTC'),
                                                  date_trunc('month', upper(p_during) AT TIME ZONE 'UTC'), interval '1 month') AS m
            LOOP
                v_asked := p_gpu_fraction * compute.month_hours(p_during, v_month);
                CONTINUE WHEN v_asked = 0;
                SELECT coalesce(sum(b.gpu_fraction * compute.month_hours(b.during, v_month)), 0) INTO v_used
                  FROM compute.bookings AS b
                 WHERE b.tenant_id = p_tenant_id AND b.pool_id = p_pool_id
                   AND b.state IN ('provisional', 'active', 'released')
                   AND b.during && tstzrange(v_month, (v_month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC')
                   AND (v_quota.project_id IS NULL OR b.project_id = v_quota.project_id)
                   AND b.reservation_id IS DISTINCT FROM p_excluding;
                IF v_used + v_asked > v_quota.gpu_hours_per_month THEN
                    PERFORM compute.raise_error('QUOTA_EXCEEDED',
                        pg_catalog.format('%s quota of %s GPU-hours in %s would be exceeded', v_scope,
                                          v_quota.gpu_hours_per_month, pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM')),
                        pg_catalog.format('%s GPU-hours remain in %s (%s used or booked, %s asked); shorten the window or ask for less.',
                                          round(greatest(v_quota.gpu_hours_per_month - v_used, 0), 3),
                                          pg_catalog.to_char(v_month AT TIME ZONE 'UTC', 'YYYY-MM'), round(v_used, 3), round(v_asked, 3)));
                END IF;
            END LOOP;
        END IF;
    END LOOP;
END
$$;

-- node_flags
CREATE OR REPLACE FUNCTION compute.node_flag_set(p_node_id uuid, p_flag text, p_by text, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the node's devices FOR UPDATE (waits for placements in flight on them), so every
-- placement that commits after this flag sees it.
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %s', p_node_id), 'List nodes in ops.nodes.');
    END IF;
    IF p_flag IS NULL OR p_flag NOT IN ('cordoned', 'draining', 'quarantined') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown node flag %L', p_flag), 'Use cordoned, draining or quarantined.');
    END IF;
    IF p_reason IS NULL OR length(p_reason) NOT BETWEEN 1 AND 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a flag needs a reason', 'Say why, in at most 1000 characters.');
    END IF;
    PERFORM 1 FROM compute.devices AS d WHERE d.node_id = p_node_id ORDER BY d.device_id FOR UPDATE;
    INSERT INTO compute.node_flags (node_id, flag, set_by, reason, set_at)
    VALUES (p_node_id, p_flag, coalesce(p_by, 'unknown'), p_reason, compute.compute_now())
    ON CONFLICT (node_id, flag) DO UPDATE SET set_by = EXCLUDED.set_by, reason = EXCLUDED.reason;
    IF p_flag = 'draining' THEN
        PERFORM compute.node_drains_complete();
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION compute.node_flag_clear(p_node_id uuid, p_flag text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %s', p_node_id), 'List nodes in ops.nodes.');
    END IF;
    DELETE FROM compute.node_flags WHERE node_id = p_node_id AND flag = p_flag;
    RETURN FOUND;
END
$$;

-- reservation_lifecycle
CREATE OR REPLACE FUNCTION compute.atom_cdi_name(p_atom_id uuid)
RETURNS text
LANGUAGE sql STABLE
AS $$
    -- The CDI device name a node exposes for an atom (kind nvidia.com/gpu): a whole GPU or slot by
    -- the GPU's uuid, a MIG instance by its MIG uuid when the inventory reports one, else GPU:placement.
    SELECT 'nvidia.com/gpu=' || CASE a.kind
        WHEN 'mig' THEN coalesce(
            (SELECT i ->> 'uuid'
               FROM compute.nodes AS n, pg_catalog.jsonb_array_elements(n.inventory -> 'devices') AS dev,
                    pg_catalog.jsonb_array_elements(coalesce(dev #> '{mig,instances}', '[]')) AS i
              WHERE n.node_id = a.node_id AND dev ->> 'uuid' = d.uuid
                AND i ->> 'profile' = a.profile AND (i ->> 'placement')::integer = a.placement),
            d.index || ':' || a.placement)
        ELSE d.uuid END
      FROM compute.atoms AS a JOIN compute.devices AS d ON d.device_id = a.device_id
     WHERE a.atom_id = p_atom_id
$$;

CREATE OR REPLACE FUNCTION compute.reservation_document(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'reservation_id', r.reservation_id, 'tenant_id', r.tenant_id, 'project_id', r.project_id,
        'pool_id', r.pool_id, 'shape', r.shape, 'count', r.count, 'state', r.state,
        'phase', CASE WHEN r.state NOT IN ('provisional', 'active') THEN 'ended'
                      WHEN upper(r.during) <= compute.compute_now() THEN 'ended'
                      WHEN lower(r.during) > compute.compute_now() THEN 'upcoming' ELSE 'running' END,
        'start', lower(r.during), 'end', upper(r.during), 'same_node', r.same_node,
        'expires_at', r.expires_at, 'hold_until', r.hold_until, 'created_at', r.created_at,
        'ended_at', r.ended_at, 'end_reason', r.end_reason,
        'bookings', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'atom_id', a.atom_id, 'node', n.name, 'device_uuid', d.uuid, 'kind', a.kind,
                       'profile', a.profile, 'placement', a.placement, 'slot', a.slot,
                       'cdi_name', compute.atom_cdi_name(a.atom_id), 'state', b.state)
                   ORDER BY n.name, d.index, a.placement, a.slot)
              FROM compute.bookings AS b
              JOIN compute.atoms AS a ON a.atom_id = b.atom_id
              JOIN compute.devices AS d ON d.device_id = b.device_id
              JOIN compute.nodes AS n ON n.node_id = b.node_id
             WHERE b.reservation_id = r.reservation_id), '[]'))
      FROM compute.reservations AS r
     WHERE r.reservation_id = p_reservation_id
$$;

CREATE OR REPLACE FUNCTION compute.reserve(p_request jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the idempotency key (unique index), quota rows, devices (SKIP LOCKED, in compute.place).
DECLARE
    v_now        timestamptz := compute.compute_now();
    v_tenant_id  uuid;
    v_project_id uuid;
    v_pool       compute.pools;
    v_offering   compute.offerings;
    v_shape      text;
    v_count      integer;
    v_start      timestamptz;
    v_end        timestamptz;
    v_same_node  boolean;
    v_hold       integer;
    v_key        text;
    v_hash       text;
    v_during     tstzrange;
    v_id         uuid := pg_catalog.gen_random_uuid();
    v_existing   compute.reservations;
    v_atoms      uuid[];
    v_fraction   numeric;
BEGIN
    -- Validate the request.
    IF p_request IS NULL OR pg_catalog.jsonb_typeof(p_request) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a reservation request is a JSON object', 'See DESIGN §17 for its fields.');
    END IF;
    v_tenant_id := compute.request_field(p_request, 'tenant_id', 'uuid', true) #>> '{}';
    v_project_id := compute.request_field(p_request, 'project_id', 'uuid', false) #>> '{}';
    SELECT * INTO v_pool FROM compute.pools AS p
     WHERE p.pool_id = (compute.request_field(p_request, 'pool_id', 'uuid', true) #>> '{}')::uuid;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_request ->> 'pool_id'), 'List the pools you may use.');
    END IF;
    v_shape := compute.request_field(p_request, 'shape', 'string', true) #>> '{}';
    v_count := coalesce(compute.request_field(p_request, 'count', 'integer', false)::integer, 1);
    v_start := coalesce(compute.request_timestamp(p_request, 'start', false), v_now);
    v_end := compute.request_timestamp(p_request, 'end', true);
    v_same_node := coalesce((compute.request_field(p_request, 'same_node', 'boolean', false))::boolean, false);
    v_hold := compute.request_field(p_request, 'hold_seconds', 'integer', false)::integer;
    v_key := compute.request_field(p_request, 'idempotency_key', 'string', false) #>> '{}';

    SELECT * INTO v_offering FROM compute.offerings AS o
     WHERE o.pool_id = v_pool.pool_id AND o.shape = v_shape AND o.instance_kind = 'devices';
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('pool %s does not offer %s', v_pool.name, v_shape),
            coalesce('Shapes offered: ' || (SELECT pg_catalog.string_agg(o.shape, ', ' ORDER BY o.shape) FROM compute.offerings AS o
                                             WHERE o.pool_id = v_pool.pool_id AND o.instance_kind = 'devices') || '.',
                     'This pool offers nothing yet.'));
    END IF;
    IF v_count < 1 OR v_count > least(v_offering.max_count, compute.limit('atoms_per_reservation')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('count %s is out of range', v_count),
            pg_catalog.format('Ask for 1 to %s atoms of %s.', least(v_offering.max_count, compute.limit('atoms_per_reservation')), v_shape));
    END IF;
    IF v_start < v_now - interval '1 minute' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('start %s is in the past', v_start),
            'Omit start (or pass null) to begin now.');
    END IF;
    v_start := greatest(v_start, v_now);  -- a start up to a minute in the past (clock skew) means now
    IF v_end <= v_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'end must come after start', 'Pass an end later than the start (or than now).');
    END IF;
    IF v_end - v_start > least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('a window of %s is too long', v_end - v_start),
            pg_catalog.format('Ask for at most %s.', least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second')));
    END IF;
    IF v_hold IS NOT NULL AND (v_hold < 1 OR v_hold > compute.limit('hold_seconds_max')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('hold_seconds %s is out of range', v_hold),
            pg_catalog.format('Use 1 to %s seconds, or omit it for no lease.', compute.limit('hold_seconds_max')));
    END IF;
    IF v_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = v_project_id AND p.tenant_id = v_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in this tenant', v_project_id), 'Create the project first.');
    END IF;
    PERFORM compute.tenant_ensure(v_tenant_id);
    v_during := tstzrange(v_start, v_end);

    -- Idempotency: the key is claimed by inserting the reservation; a concurrent holder of the same
    -- key makes us wait for its commit, then we replay its answer (or report the mismatch).
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
        'tenant_id', v_tenant_id, 'project_id', v_project_id, 'pool_id', v_pool.pool_id, 'shape', v_shape, 'count', v_count,
        'start', extract(epoch FROM (p_request ->> 'start')::timestamptz), 'end', extract(epoch FROM v_end),
        'same_node', v_same_node, 'hold_seconds', v_hold)::text, 'UTF8')), 'hex');
    INSERT INTO compute.reservations (reservation_id, tenant_id, project_id, site_id, pool_id, shape, count, during, same_node,
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + compute.limit('provisional_seconds') * interval '1 second', v_hold,
            v_now + v_hold * interval '1 second', v_key, v_hash, v_now)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT * INTO v_existing FROM compute.reservations AS r WHERE r.tenant_id = v_tenant_id AND r.idempotency_key = v_key;
        IF v_existing.request_hash <> v_hash THEN
            PERFORM compute.raise_error('IDEMPOTENCY_MISMATCH',
                pg_catalog.format('idempotency key %L was used for a different request', v_key),
                pg_catalog.format('Use a new key for a new request; the key belongs to reservation %s.', v_existing.reservation_id));
        END IF;
        RETURN compute.reservation_document(v_existing.reservation_id);
    END IF;

    -- Quota rows are locked before any device (lock order); counted once the atoms are known.
    PERFORM 1 FROM compute.quotas AS q
     WHERE q.tenant_id = v_tenant_id AND q.pool_id = v_pool.pool_id AND (q.project_id IS NULL OR q.project_id = v_project_id)
     ORDER BY q.quota_id FOR UPDATE;

    -- Place and book.
    v_atoms := compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node);
    INSERT INTO compute.bookings (reservation_id, tenant_id, project_id, site_id, pool_id, node_id, device_id, atom_id,
                                  slices, shares, gpu_fraction, during, state)
    SELECT v_id, v_tenant_id, v_project_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
           a.slices, a.shares, a.gpu_fraction, v_during, 'provisional'
      FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    SELECT sum(a.gpu_fraction) INTO v_fraction FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, v_count, v_fraction, v_id);
    RETURN compute.reservation_document(v_id);
END
$$;

CREATE OR REPLACE FUNCTION compute.reservation_renew(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
BEGIN
    IF v_reservation.hold_seconds IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s holds without a lease', p_reservation_id),
            'Only reservations made with hold_seconds are renewed.');
    END IF;
    IF v_reservation.state NOT IN ('provisional', 'active') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s is %s', p_reservation_id, v_reservation.state),
            'Reserve again.');
    END IF;
    UPDATE compute.reservations SET hold_until = compute.compute_now() + hold_seconds * interval '1 second'
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;

-- capacity_queries
CREATE OR REPLACE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamptz, p_end timestamptz)
RETURNS TABLE (node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Pass an existing pool.');
    END IF;
    -- Busy atoms are found from the bookings that overlap the window (one index scan), then the
    -- schedulable atoms of the shape minus those: no per-atom probe.
    RETURN QUERY
    WITH busy AS (
        SELECT DISTINCT a.atom_id
          FROM compute.bookings AS b
          JOIN compute.atoms AS a ON a.device_id = b.device_id AND a.slices && b.slices AND a.shares && b.shares
         WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active') AND b.during && tstzrange(p_start, p_end)
           AND a.shape = p_shape
    )
    SELECT a.node_id, n.name, count(*)::integer, pg_catalog.array_agg(a.atom_id ORDER BY a.device_index, a.slices, a.slot)
      FROM compute.atoms AS a
      JOIN compute.nodes AS n ON n.node_id = a.node_id
     WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND compute.atom_is_schedulable(a, tstzrange(p_start, p_end))
       AND a.atom_id NOT IN (SELECT busy.atom_id FROM busy)
     GROUP BY a.node_id, n.name, n.rank
     ORDER BY n.rank;
END
$$;

CREATE OR REPLACE FUNCTION compute.capacity_earliest(p_pool_id uuid, p_shape text, p_count integer, p_duration interval,
                                          p_not_before timestamptz DEFAULT NULL)
RETURNS TABLE (start_at timestamptz, end_at timestamptz, reason text)
LANGUAGE plpgsql STABLE
AS $$
-- Candidate starts are not_before and every instant at which an atom of the shape becomes free
-- (a booking's end) or valid (a layout change), up to the search horizon; the first candidate with
-- p_count atoms free for p_duration wins. Bounded by limit capacity_search_checks.
DECLARE
    v_from    timestamptz := greatest(coalesce(p_not_before, compute.compute_now()), compute.compute_now());
    v_horizon timestamptz := compute.compute_now() + compute.limit('capacity_search_horizon_seconds') * interval '1 second';
    v_total   integer;
    v_t       timestamptz;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_duration IS NULL OR p_duration <= interval '0' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_earliest needs a positive count and duration', 'Pass count >= 1 and a positive interval.');
    END IF;
    SELECT count(*) INTO v_total FROM compute.atoms AS a
     WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND upper_inf(a.valid)
       AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id);
    IF v_total < p_count THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
            pg_catalog.format('the pool has only %s schedulable atoms of shape %s, fewer than %s', v_total, p_shape, p_count);
        RETURN;
    END IF;
    FOR v_t IN
        SELECT t FROM (
            SELECT v_from AS t
            UNION
            SELECT upper(b.during) FROM compute.bookings AS b
             WHERE b.pool_id = p_pool_id AND b.state IN ('provisional', 'active')
               AND upper(b.during) > v_from AND upper(b.during) <= v_horizon
            UNION
            SELECT lower(a.valid) FROM compute.atoms AS a
             WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND lower(a.valid) > v_from AND lower(a.valid) <= v_horizon
        ) AS candidates
        ORDER BY t
        LIMIT compute.limit('capacity_search_checks')
    LOOP
        IF (SELECT coalesce(sum(f.free_atoms), 0) FROM compute.capacity_free(p_pool_id, p_shape, v_t, v_t + p_duration) AS f) >= p_count THEN
            RETURN QUERY SELECT v_t, v_t + p_duration, NULL::text;
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz,
        pg_catalog.format('no window of %s for %s atoms of shape %s starts before %s (search horizon)', p_duration, p_count, p_shape, v_horizon);
END
$$;

-- ops_capacity
CREATE OR REPLACE VIEW ops.nodes AS
    SELECT n.node_id, n.name, s.name AS site, p.name AS pool, p.gpu_model,
           (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id AND d.present) AS gpus,
           (SELECT pg_catalog.array_agg(f.flag ORDER BY f.flag) FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flags,
           CASE WHEN NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id AND f.flag = 'draining') THEN NULL
                WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                              WHERE b.node_id = n.node_id AND b.state IN ('provisional', 'active')
                                AND b.during @> compute.compute_now()) THEN 'draining'
                ELSE 'drained' END AS drain,
           (SELECT pg_catalog.jsonb_object_agg(f.flag, pg_catalog.jsonb_build_object('by', f.set_by, 'reason', f.reason, 'at', f.set_at,
                                                                                    'completed_at', f.completed_at))
              FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flag_details,
           n.inventory_at, n.created_at
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id;

CREATE OR REPLACE VIEW ops.pool_capacity AS
    WITH now_ AS (SELECT compute.compute_now() AS t)
    SELECT p.pool_id, p.name AS pool, p.gpu_model, a.shape,
           count(*) AS total,
           count(*) FILTER (WHERE d.present AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)) AS bookable,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.bookings AS b
                                          WHERE b.atom_id = a.atom_id AND b.state IN ('provisional', 'active') AND b.during @> now_.t)) AS held_now,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.bookings AS b
                                          WHERE b.atom_id = a.atom_id AND b.state IN ('provisional', 'active') AND lower(b.during) > now_.t)) AS held_future,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)) AS cordoned
      FROM now_, compute.atoms AS a
      JOIN compute.pools AS p ON p.pool_id = a.pool_id
      JOIN compute.devices AS d ON d.device_id = a.device_id
     WHERE a.valid @> now_.t
     GROUP BY p.pool_id, p.name, p.gpu_model, a.shape;

CREATE OR REPLACE VIEW ops.atom_holders AS
    WITH now_ AS (SELECT compute.compute_now() AS t)
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
                            AND b.state IN ('provisional', 'active') AND b.during @> now_.t
                          LIMIT 1) AS cur ON true
      LEFT JOIN LATERAL (SELECT b.reservation_id, b.tenant_id, b.during FROM compute.bookings AS b
                          WHERE b.atom_id = a.atom_id AND b.state IN ('provisional', 'active') AND lower(b.during) > now_.t
                          ORDER BY lower(b.during) LIMIT 1) AS nxt ON true
     WHERE a.valid @> now_.t;
DROP FUNCTION compute.capacity_earliest_start(uuid, text, integer, interval, timestamptz, timestamptz);
DROP FUNCTION compute.node_get(uuid);
DROP FUNCTION compute.pool_get(uuid);
DROP FUNCTION compute.require_name(text, text);

COMMIT;
