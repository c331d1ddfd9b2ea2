-- Deploy better_compute:placement_recheck_btree to pg
-- Placement's recheck and extend's check read bookings through a btree (compute.atom_held), not the GiST
-- index bookings_exclusive: under concurrent writes PostgreSQL 15's GiST scans of it were seen to miss
-- committed live bookings, and its exclusion check to let an overlapping booking in (docs/capacity.md).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE INDEX bookings_atom_live ON compute.bookings (atom_id, upper(during)) WHERE state IN ('provisional', 'active');

CREATE FUNCTION compute.atom_held(p_atom compute.atoms, p_during tstzrange, p_excluding uuid)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- The check placement (step 4) and extend make under the device lock, so it must not miss a row:
    -- it finds the device's atoms (a table written only when inventory or layouts change), then
    -- their live bookings through the btree bookings_atom_live, never through the GiST index
    -- bookings_exclusive. Under concurrent writes to a young, growing bookings table,
    -- PostgreSQL 15's GiST scans of that index were seen to miss committed live bookings for
    -- seconds, and its exclusion check to let an overlapping one in (docs/capacity.md). A booking
    -- holds exactly its atom's device, slices and shares (compute.booking_matches_atom), so the
    -- bookings that overlap p_atom are the live bookings of the device's atoms that overlap it.
    RETURN EXISTS (
        SELECT 1 FROM compute.atoms AS x
          JOIN compute.bookings AS b ON b.atom_id = x.atom_id
         WHERE x.device_id = p_atom.device_id AND x.slices && p_atom.slices AND x.shares && p_atom.shares
           AND b.state IN ('provisional', 'active') AND b.reservation_id IS DISTINCT FROM p_excluding
           AND upper(b.during) > lower(p_during) AND lower(b.during) < upper(p_during));
END
$$;
COMMENT ON FUNCTION compute.atom_held(compute.atoms, tstzrange, uuid) IS
    'A live booking (of a reservation other than p_excluding) holds a slice and share of the atom during the window; never reads bookings_exclusive.';

CREATE OR REPLACE FUNCTION compute.atom_is_free(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN NOT compute.atom_held(p_atom, p_during, NULL);
END
$$;

CREATE OR REPLACE FUNCTION compute.reservation_extend(p_reservation_id uuid, p_new_end timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the reservation row, quota rows, devices (FOR UPDATE, device_id order).
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
    v_now         timestamptz := compute.compute_now();
    v_during      tstzrange;
    v_max         interval;
    v_fraction    numeric;
    v_conflict    boolean;
BEGIN
    IF v_reservation.state NOT IN ('provisional', 'active') OR upper(v_reservation.during) <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s has ended', p_reservation_id),
            'Reserve again for a new window.');
    END IF;
    IF p_new_end IS NULL OR p_new_end <= greatest(lower(v_reservation.during), v_now) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the new end must come after the start and after now',
            'To end a reservation now, release it.');
    END IF;
    SELECT least(o.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') INTO v_max
      FROM compute.offerings AS o
     WHERE o.pool_id = v_reservation.pool_id AND o.shape = v_reservation.shape AND o.instance_kind = 'devices';
    IF p_new_end - lower(v_reservation.during) > coalesce(v_max, interval '0') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the extended window is too long', pg_catalog.format('Windows of this offering last at most %s.', v_max));
    END IF;
    v_during := tstzrange(lower(v_reservation.during), p_new_end);

    PERFORM 1 FROM compute.quotas AS q
     WHERE q.tenant_id = v_reservation.tenant_id AND q.pool_id = v_reservation.pool_id
       AND (q.project_id IS NULL OR q.project_id = v_reservation.project_id)
     ORDER BY q.quota_id FOR UPDATE;
    PERFORM 1 FROM compute.devices AS d
     WHERE d.device_id IN (SELECT b.device_id FROM compute.bookings AS b WHERE b.reservation_id = p_reservation_id)
     ORDER BY d.device_id FOR UPDATE;
    SELECT sum(b.gpu_fraction) INTO v_fraction FROM compute.bookings AS b WHERE b.reservation_id = p_reservation_id;
    PERFORM compute.quota_check(v_reservation.tenant_id, v_reservation.project_id, v_reservation.pool_id, v_during,
                                v_reservation.count, v_fraction, p_reservation_id);
    -- Checked under the device locks, bookings read through a btree (compute.atom_held); the exclusion
    -- constraint is the last word.
    v_conflict := EXISTS (SELECT 1 FROM compute.bookings AS mine JOIN compute.atoms AS a ON a.atom_id = mine.atom_id
                           WHERE mine.reservation_id = p_reservation_id AND compute.atom_held(a, v_during, p_reservation_id));
    IF NOT v_conflict THEN
        BEGIN
            UPDATE compute.bookings SET during = v_during WHERE reservation_id = p_reservation_id;
        EXCEPTION WHEN exclusion_violation THEN
            v_conflict := true;
        END;
    END IF;
    IF v_conflict THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('reservation %s cannot be extended to %s', p_reservation_id, p_new_end),
            'Another reservation holds some of its atoms within the longer window; compute.capacity_earliest finds free windows.');
    END IF;
    UPDATE compute.reservations SET during = v_during WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;

COMMIT;
