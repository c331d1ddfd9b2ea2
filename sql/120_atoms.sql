-- Atoms (docs/architecture.md §5-6): the only bookable things. A whole GPU, a MIG instance (profile + placement)
-- or a time-slice slot. Each atom covers a part of its device:
--   slices  the GPU's memory slices, [0,8) for a whole GPU or a slot, [p, p+size) for a MIG instance
--   shares  [0,) (all) for a whole GPU or a MIG instance, [k,k+1) for time-slice slot k
-- and is valid for a time range, so that a layout change can be scheduled at a time T: atoms that go
-- away end at T, new ones start at T. Atoms of one device valid at the same instant never overlap
-- (constraint atoms_disjoint): so a partitioned GPU's parent is never bookable while it is split.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.atoms (
    atom_id      uuid CONSTRAINT atoms_pkey PRIMARY KEY,
    site_id      uuid NOT NULL,
    pool_id      uuid NOT NULL,
    node_id      uuid NOT NULL,
    device_id    uuid NOT NULL,
    node_rank    bigint NOT NULL,   -- copies of nodes.rank and devices.index: placement walks
    device_index integer NOT NULL,  -- an index in pack or spread order and stops early
    kind         text NOT NULL CONSTRAINT atoms_kind_check CHECK (kind IN ('gpu', 'mig', 'slot')),
    profile      text,
    placement    integer,
    slot         integer,
    slot_count   integer,
    shape        text NOT NULL GENERATED ALWAYS AS (CASE kind WHEN 'mig' THEN 'mig:' || profile ELSE kind END) STORED,
    slices       int4range NOT NULL CONSTRAINT atoms_slices_check CHECK (NOT isempty(slices) AND slices <@ int4range(0, 8)),
    shares       int4range NOT NULL CONSTRAINT atoms_shares_check CHECK (NOT isempty(shares) AND lower(shares) >= 0),
    gpu_fraction numeric NOT NULL CONSTRAINT atoms_gpu_fraction_check CHECK (gpu_fraction > 0 AND gpu_fraction <= 1),
    valid        tstzrange NOT NULL CONSTRAINT atoms_valid_check CHECK (NOT isempty(valid) AND NOT lower_inf(valid) AND lower_inc(valid) AND NOT upper_inc(valid)),
    CONSTRAINT atoms_mig_has_profile_and_placement CHECK ((kind = 'mig') = (profile IS NOT NULL AND placement IS NOT NULL)),
    CONSTRAINT atoms_slot_has_slot_and_count CHECK ((kind = 'slot') = (slot IS NOT NULL AND slot_count IS NOT NULL)),
    CONSTRAINT atoms_device_id_site_id_fkey FOREIGN KEY (device_id, site_id) REFERENCES compute.devices (device_id, site_id),
    CONSTRAINT atoms_disjoint EXCLUDE USING gist (device_id WITH =, slices WITH &&, shares WITH &&, valid WITH &&)
);
CREATE INDEX atoms_pack_order ON compute.atoms (pool_id, shape, node_rank, device_index, slices, slot);
CREATE INDEX atoms_spread_order ON compute.atoms (pool_id, shape, device_index, node_rank, slices, slot);
CREATE INDEX atoms_device ON compute.atoms (device_id);
COMMENT ON TABLE compute.atoms IS 'The only bookable things: whole GPU, MIG instance or time-slice slot, each valid for a time range.';

CREATE FUNCTION compute.layout_atoms(p_device_id uuid, p_layout text)
RETURNS TABLE (kind text, profile text, placement integer, slot integer, slot_count integer,
               slices int4range, shares int4range, gpu_fraction numeric)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_device    compute.devices;
    v_slots     integer;
    v_item      text;
    v_profile   jsonb;
    v_name      text;
    v_placement integer;
    v_size      integer;
    v_taken     int4range[] := '{}';
BEGIN
    SELECT * INTO v_device FROM compute.devices AS d WHERE d.device_id = p_device_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no device %s', p_device_id), 'List devices in ops.atom_holders.');
    END IF;

    -- whole: one atom, the GPU.
    IF p_layout = 'whole' THEN
        RETURN QUERY SELECT 'gpu'::text, NULL::text, NULL::integer, NULL::integer, NULL::integer,
                            int4range(0, 8), int4range(0, NULL), 1::numeric;
        RETURN;
    END IF;

    -- timeslice:N: N slots sharing the whole GPU.
    IF p_layout ~ '^timeslice:[0-9]{1,4}$' THEN
        v_slots := pg_catalog.split_part(p_layout, ':', 2)::integer;
        IF v_slots < 2 OR v_slots > compute.limit('timeslice_slots') THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('timeslice:%s is out of range', v_slots),
                pg_catalog.format('Use 2 to %s slots (limit timeslice_slots).', compute.limit('timeslice_slots')));
        END IF;
        RETURN QUERY SELECT 'slot'::text, NULL::text, NULL::integer, k, v_slots, int4range(0, 8), int4range(k, k + 1),
                            1::numeric / v_slots
                       FROM pg_catalog.generate_series(0, v_slots - 1) AS k;
        RETURN;
    END IF;

    -- mig:profile@placement,...: instances the GPU reports as legal, not overlapping.
    IF p_layout IS NULL OR p_layout !~ '^mig:[^@,]+@[0-9]{1,4}(,[^@,]+@[0-9]{1,4})*$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid layout %L', p_layout),
            'Use whole, timeslice:N, or mig:PROFILE@PLACEMENT[,PROFILE@PLACEMENT...], e.g. mig:3g.71gb@0,3g.71gb@4.');
    END IF;
    IF NOT v_device.mig_supported THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('GPU %s does not support MIG', v_device.uuid),
            'Use whole or timeslice:N on this GPU.');
    END IF;
    FOREACH v_item IN ARRAY pg_catalog.string_to_array(pg_catalog.substr(p_layout, 5), ',') LOOP
        v_name := pg_catalog.split_part(v_item, '@', 1);
        v_placement := pg_catalog.split_part(v_item, '@', 2)::integer;
        SELECT p INTO v_profile FROM pg_catalog.jsonb_array_elements(v_device.mig_profiles) AS p WHERE p ->> 'name' = v_name;
        IF v_profile IS NULL THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('GPU %s has no MIG profile %L', v_device.uuid, v_name),
                pg_catalog.format('Profiles of this GPU: %s.', (SELECT pg_catalog.string_agg(p ->> 'name', ', ')
                                                                  FROM pg_catalog.jsonb_array_elements(v_device.mig_profiles) AS p)));
        END IF;
        IF NOT v_profile -> 'placements' @> pg_catalog.to_jsonb(v_placement) THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s cannot be placed at %s', v_name, v_placement),
                pg_catalog.format('Legal placements of %s: %s.', v_name, v_profile -> 'placements'));
        END IF;
        v_size := (v_profile ->> 'slices')::integer;
        IF EXISTS (SELECT 1 FROM pg_catalog.unnest(v_taken) AS t WHERE t && int4range(v_placement, v_placement + v_size)) THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s@%s overlaps another instance', v_name, v_placement),
                'MIG instances of one GPU must use disjoint memory slices.');
        END IF;
        v_taken := v_taken || int4range(v_placement, v_placement + v_size);
        RETURN QUERY SELECT 'mig'::text, v_name, v_placement, NULL::integer, NULL::integer,
                            int4range(v_placement, v_placement + v_size), int4range(0, NULL), v_size / 8.0;
    END LOOP;
END
$$;
COMMENT ON FUNCTION compute.layout_atoms(uuid, text) IS 'The atoms a layout gives a device; INVALID_ARGUMENT for a layout the GPU cannot take.';

CREATE FUNCTION compute.device_set_layout(p_device_id uuid, p_layout text, p_at timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: the device row (FOR UPDATE) first, as placement and extension do; then its atoms and
-- bookings; then the node's node_specs row (the devices_node_spec trigger). compute.node_register
-- locks a node's devices before its node_specs row too (one order: node row, devices, node_specs).
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
      JOIN compute.bookings AS b ON b.atom_id = a.atom_id AND b.state = 'held'
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
                               WHERE b.atom_id = v_atom.atom_id AND b.state = 'held') THEN
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
$$;
COMMENT ON FUNCTION compute.device_set_layout(uuid, text, timestamptz) IS
    'Change a GPU''s layout now or at a future time, calling off changes scheduled after it; CAPACITY_CONFLICT (blocking reservations in the HINT) when booked atoms would go away.';
