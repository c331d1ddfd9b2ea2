-- Inventory in (docs/architecture.md §17): compute.node_register takes the inventory document a node daemon
-- sends (docs/inventory.md) and creates or updates the node, its devices and their atoms.
-- Unknown fields are kept (the whole document is stored); missing or mistyped required ones are
-- INVALID_ARGUMENT naming the field. A GPU that is not the pool's model refuses the whole node.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.inventory_require(p_doc jsonb, p_path text, p_field text, p_type text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_doc -> p_field IS NULL OR pg_catalog.jsonb_typeof(p_doc -> p_field) <> p_type THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('inventory field %s%s is missing or not %s %s', p_path, p_field,
                              CASE WHEN p_type IN ('array', 'object') THEN 'an' ELSE 'a' END, p_type),
            'See docs/inventory.md for the inventory document.');
    END IF;
    RETURN p_doc -> p_field;
END
$$;
COMMENT ON FUNCTION compute.inventory_require(jsonb, text, text, text) IS 'The field of an inventory object, or INVALID_ARGUMENT naming it.';

CREATE FUNCTION compute.inventory_validate(p_inventory jsonb)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_device  jsonb;
    v_path    text;
    v_ordinal integer;
    v_mig     jsonb;
BEGIN
    IF p_inventory IS NULL OR pg_catalog.jsonb_typeof(p_inventory) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'an inventory is a JSON object', 'See docs/inventory.md.');
    END IF;
    IF pg_catalog.octet_length(p_inventory::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the inventory document is too large',
            pg_catalog.format('Send at most %s bytes (limit node_message_bytes).', compute.limit('node_message_bytes')));
    END IF;
    IF compute.inventory_require(p_inventory, '', 'version', 'number') <> '1'::jsonb THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('inventory version %s is not supported', p_inventory -> 'version'),
            'This control plane reads inventory version 1.');
    END IF;
    PERFORM compute.inventory_require(p_inventory, '', 'hostname', 'string');
    IF pg_catalog.jsonb_array_length(compute.inventory_require(p_inventory, '', 'devices', 'array'))
       > compute.limit('devices_per_node') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the inventory lists too many devices',
            pg_catalog.format('A node has at most %s GPUs (limit devices_per_node).', compute.limit('devices_per_node')));
    END IF;
    FOR v_device, v_ordinal IN SELECT d, o FROM pg_catalog.jsonb_array_elements(p_inventory -> 'devices') WITH ORDINALITY AS x(d, o) LOOP
        v_path := pg_catalog.format('devices[%s].', v_ordinal - 1);
        PERFORM compute.inventory_require(v_device, v_path, 'uuid', 'string');
        PERFORM compute.inventory_require(v_device, v_path, 'index', 'number');
        PERFORM compute.inventory_require(v_device, v_path, 'pci_bus_id', 'string');
        PERFORM compute.inventory_require(v_device, v_path, 'model', 'string');
        PERFORM compute.inventory_require(v_device, v_path, 'memory_mib', 'number');
        IF v_device ? 'nvlink_peers' THEN
            PERFORM compute.inventory_require(v_device, v_path, 'nvlink_peers', 'array');
        END IF;
        IF v_device ? 'mig' THEN
            v_mig := compute.inventory_require(v_device, v_path, 'mig', 'object');
            PERFORM compute.inventory_require(v_mig, v_path || 'mig.', 'supported', 'boolean');
            IF v_mig ? 'profiles' THEN
                PERFORM compute.inventory_require(v_mig, v_path || 'mig.', 'profiles', 'array');
                IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_mig -> 'profiles') AS p
                            WHERE pg_catalog.jsonb_typeof(p -> 'name') IS DISTINCT FROM 'string'
                               OR pg_catalog.jsonb_typeof(p -> 'slices') IS DISTINCT FROM 'number'
                               OR pg_catalog.jsonb_typeof(p -> 'placements') IS DISTINCT FROM 'array') THEN
                    PERFORM compute.raise_error('INVALID_ARGUMENT',
                        pg_catalog.format('inventory field %smig.profiles needs name, slices and placements in every profile', v_path),
                        'See docs/inventory.md for the inventory document.');
                END IF;
            END IF;
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(p_inventory -> 'devices') AS d
                GROUP BY d ->> 'uuid' HAVING count(*) > 1) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the inventory lists a GPU uuid twice', 'Each GPU appears once.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.inventory_validate(jsonb) IS 'INVALID_ARGUMENT unless the document is a version-1 inventory (docs/inventory.md).';

CREATE FUNCTION compute.inventory_layout(p_device jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    -- A GPU in MIG mode with instances starts with those instances as its layout; otherwise whole.
    -- The inventory lists MIG devices (compute instances): a GPU instance split into several is
    -- listed once per compute instance, and is one atom (once in the layout).
    SELECT CASE
        WHEN p_device #>> '{mig,mode}' = 'enabled' AND pg_catalog.jsonb_array_length(coalesce(p_device #> '{mig,instances}', '[]')) > 0
        THEN 'mig:' || (SELECT pg_catalog.string_agg(g.profile || '@' || g.placement, ',' ORDER BY g.placement)
                          FROM (SELECT DISTINCT i ->> 'profile' AS profile, (i ->> 'placement')::integer AS placement
                                  FROM pg_catalog.jsonb_array_elements(p_device #> '{mig,instances}') AS i) AS g)
        ELSE 'whole'
    END
$$;
COMMENT ON FUNCTION compute.inventory_layout(jsonb) IS 'The layout a newly seen GPU starts with: its GPU instances (once each), or whole.';

CREATE FUNCTION compute.node_register(p_pool_id uuid, p_name text, p_inventory jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
-- Lock order (every path that touches a node's rows): the node row (FOR NO KEY UPDATE: inserts that
-- reference it, e.g. bookings and flags, take KEY SHARE and do not wait), then its devices (FOR UPDATE,
-- device_id order), then its node_specs row (compute.node_spec_refresh, from the triggers). Placement,
-- compute.device_set_layout and compute.node_flag_set take devices before node_specs too; so the
-- devices here are locked before the inventory update whose trigger locks node_specs.
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
    v_pool := compute.pool_get(p_pool_id);
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
    SELECT * INTO v_node FROM compute.nodes AS n WHERE n.site_id = v_pool.site_id AND n.name = p_name FOR NO KEY UPDATE;
    IF FOUND AND v_node.pool_id <> p_pool_id THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('node %s belongs to another pool', p_name),
            'A node never changes pool: register it under its own pool.');
    ELSIF FOUND THEN
        PERFORM 1 FROM compute.devices AS d WHERE d.node_id = v_node.node_id ORDER BY d.device_id FOR UPDATE;
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
            -- Worded the same whoever's node holds it: nothing says that it exists elsewhere.
            PERFORM compute.raise_error('INVALID_ARGUMENT',
                pg_catalog.format('GPU %s cannot be registered on node %s', v_device ->> 'uuid', p_name),
                'A GPU moved between servers must be removed from its old node first; otherwise ask the operator.');
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
COMMENT ON FUNCTION compute.node_register(uuid, text, jsonb) IS
    'Create or update a node, its GPUs and their atoms from an inventory document (docs/inventory.md).';
