-- Revert better_compute:placement_recheck_btree from pg

BEGIN;

SET LOCAL ROLE bc_owner;

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
    BEGIN
        UPDATE compute.bookings SET during = v_during WHERE reservation_id = p_reservation_id;
    EXCEPTION WHEN exclusion_violation THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('reservation %s cannot be extended to %s', p_reservation_id, p_new_end),
            'Another reservation holds some of its atoms within the longer window; compute.capacity_earliest finds free windows.');
    END;
    UPDATE compute.reservations SET during = v_during WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$$;

CREATE OR REPLACE FUNCTION compute.atom_is_free(p_atom compute.atoms, p_during tstzrange)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1 FROM compute.bookings AS b
         WHERE b.site_id = p_atom.site_id AND b.device_id = p_atom.device_id
           AND b.slices && p_atom.slices AND b.shares && p_atom.shares AND b.during && p_during
           AND b.state IN ('provisional', 'active'));
END
$$;

DROP FUNCTION compute.atom_held(compute.atoms, tstzrange, uuid);
DROP INDEX compute.bookings_atom_live;

COMMIT;
