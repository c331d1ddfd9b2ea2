-- Revert better_compute:node_register_lock_order from pg
-- node_register locks the node's devices before its inventory update (node row, devices, node_specs: one lock order; no deadlock with device_set_layout)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.device_set_layout(p_device_id uuid, p_layout text, p_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- Lock order: the device row (FOR UPDATE) first, as placement and extension do; then its atoms and bookings.
-- From v_at on, the GPU has exactly the new layout's atoms: any change scheduled later is called off.
-- An atom is known by its identity (kind, profile, placement, slot, slot_count) in the layout.
DECLARE
    v_at        timestamptz := coalesce(p_at, compute.compute_now());
    v_device    compute.devices;
    v_next      text[];          -- the identities of the new layout's atoms
    v_identity  text;
    v_atom      compute.atoms;
    v_keep      uuid;            -- the atom of v_identity that is valid from v_keep_from on
    v_keep_from timestamptz;
    v_blocking  text;
    v_changed   integer := 0;
    v_count     integer;
BEGIN
    SELECT * INTO v_device FROM compute.devices AS d WHERE d.device_id = p_device_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no device %s', p_device_id), 'List devices in ops.atom_holders.');
    END IF;
    IF v_at < compute.compute_now() THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a layout change cannot be scheduled in the past',
            'Omit the time to change now, or pass a future time.');
    END IF;
    IF NOT pg_catalog.isfinite(v_at) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a layout change needs a finite time',
            'Omit the time to change now, or pass a future time.');
    END IF;
    SELECT pg_catalog.array_agg(ROW(l.kind, l.profile, l.placement, l.slot, l.slot_count)::text) INTO v_next
      FROM compute.layout_atoms(p_device_id, p_layout) AS l;

    -- Refuse: a live booking of an atom that goes away overlaps the change time or comes after it.
    SELECT pg_catalog.string_agg(DISTINCT b.reservation_id::text, ', ') INTO v_blocking
      FROM compute.atoms AS a
      JOIN compute.bookings AS b ON b.atom_id = a.atom_id AND b.state IN ('provisional', 'active')
     WHERE a.device_id = p_device_id AND a.valid && tstzrange(v_at, NULL)
       AND b.during && tstzrange(v_at, NULL)
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    IF v_blocking IS NOT NULL THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('layout %s of GPU %s cannot start at %s: atoms that go away are booked', p_layout, v_device.uuid, v_at),
            pg_catalog.format('Release or wait for reservations %s, or schedule the change after they end.', v_blocking));
    END IF;

    -- Atoms that go away: never valid if they had not started by then, else valid until v_at.
    -- Bookings of atoms that will never exist can only be void ones (live ones refused above): they go too.
    DELETE FROM compute.bookings AS b
     USING compute.atoms AS a
     WHERE b.atom_id = a.atom_id AND a.device_id = p_device_id AND lower(a.valid) >= v_at AND b.state = 'void'
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    DELETE FROM compute.atoms AS a
     WHERE a.device_id = p_device_id AND lower(a.valid) >= v_at
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;
    UPDATE compute.atoms AS a SET valid = tstzrange(lower(a.valid), v_at)
     WHERE a.device_id = p_device_id AND a.valid @> v_at AND lower(a.valid) < v_at
       AND NOT ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = ANY (v_next);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    -- Atoms that stay keep their rows and bookings. Each identity is one atom from v_at on (from its
    -- start, if it is valid at v_at or ends there). Earlier changes may have left several atoms of
    -- one identity after v_at (whole, then MIG at 10:00, whole again at 20:00: two whole-GPU atoms);
    -- they become one where the bookings allow it, so that a booking may cross the old seam: a later
    -- atom with no live booking hands its other bookings to the kept one and goes; a kept atom with no
    -- booking at all gives way to the later one. Where both hold live bookings they stay two atoms,
    -- the first ending where the second starts. Atoms of other identities no longer overlap [v_at,)
    -- (above), so the kept atom can always grow into the gaps.
    FOREACH v_identity IN ARRAY v_next LOOP
        v_keep := NULL;
        FOR v_atom IN SELECT a.* FROM compute.atoms AS a
                       WHERE a.device_id = p_device_id AND (upper_inf(a.valid) OR upper(a.valid) >= v_at)
                         AND ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text = v_identity
                       ORDER BY lower(a.valid) LOOP
            IF v_keep IS NULL THEN
                v_keep := v_atom.atom_id;
                v_keep_from := least(lower(v_atom.valid), v_at);
            ELSIF NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                               WHERE b.atom_id = v_atom.atom_id AND b.state IN ('provisional', 'active')) THEN
                UPDATE compute.bookings AS b SET atom_id = v_keep WHERE b.atom_id = v_atom.atom_id;
                DELETE FROM compute.atoms AS a WHERE a.atom_id = v_atom.atom_id;
                v_changed := v_changed + 1;
            ELSIF NOT EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.atom_id = v_keep) THEN
                DELETE FROM compute.atoms AS a WHERE a.atom_id = v_keep;
                v_changed := v_changed + 1;
                v_keep := v_atom.atom_id;
            ELSE
                UPDATE compute.atoms AS a SET valid = tstzrange(v_keep_from, lower(v_atom.valid))
                 WHERE a.atom_id = v_keep AND a.valid <> tstzrange(v_keep_from, lower(v_atom.valid));
                GET DIAGNOSTICS v_count = ROW_COUNT;
                v_changed := v_changed + v_count;
                v_keep := v_atom.atom_id;
                v_keep_from := lower(v_atom.valid);
            END IF;
        END LOOP;
        IF v_keep IS NOT NULL THEN
            UPDATE compute.atoms AS a SET valid = tstzrange(v_keep_from, NULL)
             WHERE a.atom_id = v_keep AND a.valid <> tstzrange(v_keep_from, NULL);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_changed := v_changed + v_count;
        END IF;
    END LOOP;

    -- New atoms start at v_at.
    INSERT INTO compute.atoms (atom_id, site_id, pool_id, node_id, device_id, node_rank, device_index, kind, profile,
                               placement, slot, slot_count, slices, shares, gpu_fraction, valid)
    SELECT pg_catalog.gen_random_uuid(), v_device.site_id, n.pool_id, v_device.node_id, p_device_id, n.rank,
           v_device.index, l.kind, l.profile, l.placement, l.slot, l.slot_count, l.slices, l.shares, l.gpu_fraction,
           tstzrange(v_at, NULL)
      FROM compute.layout_atoms(p_device_id, p_layout) AS l
      JOIN compute.nodes AS n ON n.node_id = v_device.node_id
     WHERE NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                        WHERE a.device_id = p_device_id AND a.valid @> v_at
                          AND (l.kind, l.profile, l.placement, l.slot, l.slot_count)
                              IS NOT DISTINCT FROM (a.kind, a.profile, a.placement, a.slot, a.slot_count));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_changed := v_changed + v_count;

    UPDATE compute.devices SET layout = p_layout, layout_since = v_at WHERE device_id = p_device_id;
    RETURN v_changed;
END
$function$;

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
