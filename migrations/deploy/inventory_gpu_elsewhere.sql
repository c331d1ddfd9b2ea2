-- Deploy better_compute:inventory_gpu_elsewhere to pg
-- compute.node_register refuses a GPU another node holds without saying that it exists elsewhere.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.node_register(p_pool_id uuid, p_name text, p_inventory jsonb)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
-- Lock order: the node (FOR UPDATE), then its devices.
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
$function$;

COMMIT;
