-- Revert better_compute:admission_bounds from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM compute.limits WHERE name IN ('admissions_pending_per_tenant', 'admissions_pending_per_credential');

SET LOCAL check_function_bodies = off;

DROP FUNCTION api.prepare(text,uuid,jsonb,text);

DROP FUNCTION compute.admission_slot(uuid,text);

DROP FUNCTION compute.admission_slot_held(uuid,text,integer);

DROP FUNCTION compute.api_reservations_extend_check(uuid,text,jsonb);

DROP FUNCTION compute.api_reservations_renew_check(uuid,text,jsonb);

DROP FUNCTION compute.reservation_extend_check(compute.reservations,timestamp with time zone,timestamp with time zone);

DROP FUNCTION compute.reservation_renew_check(compute.reservations);

CREATE OR REPLACE FUNCTION api.prepare(p_method text, p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_now         timestamptz := compute.compute_now();
    v_method      api.methods;
    v_parent_id   text;
    v_resource_id text;
    v_attributes  jsonb;
    v_key         text;
    v_hash        text;
    v_existing    compute.admissions;
    v_prepared    jsonb;
    v_admission   uuid := pg_catalog.gen_random_uuid();
BEGIN
    -- 1. The method, the tenant and the input's shape.
    v_method := compute.method_get(p_method);
    IF p_tenant_id IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'no tenant', 'Send X-Tenant-Id (the Better IAM tenant you act in).');
    END IF;
    PERFORM compute.input_check(v_method.input_schema, p_input);
    v_attributes := p_input - 'idempotency_key';

    -- 2. The parent and the resource must be the tenant's (NOT_FOUND before IAM is asked anything).
    IF v_method.parent_key IS NOT NULL AND coalesce(p_input -> v_method.parent_key, 'null') <> 'null' THEN
        v_parent_id := compute.input_uuid(p_input, v_method.parent_key)::text;
        PERFORM compute.resource_require(p_tenant_id, v_method.parent_type, v_parent_id);
    END IF;
    IF v_method.resource_key IS NOT NULL THEN
        v_resource_id := CASE WHEN v_method.resource_type = 'compute-audit-event'
                              THEN compute.input_integer(p_input, v_method.resource_key)::text
                              ELSE compute.input_uuid(p_input, v_method.resource_key)::text END;
        PERFORM compute.resource_require(p_tenant_id, v_method.resource_type, v_resource_id);
    END IF;
    IF v_method.kind = 'read' THEN
        RETURN pg_catalog.jsonb_build_object('admission_id', NULL,
            'iam', compute.iam_request(p_tenant_id, v_method, coalesce(v_resource_id, '*'), v_attributes));
    END IF;

    -- 3. Idempotency: one admission per key (serialised on the key), replayed for the same request.
    v_key := compute.input_text(p_input, 'idempotency_key', false);
    IF v_key IS NOT NULL AND length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use a uuid.');
    END IF;
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(p_method || ' ' || v_attributes::text, 'UTF8')), 'hex');
    IF v_key IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(p_tenant_id::text || '/' || p_method || '/' || v_key, 0));
        SELECT * INTO v_existing FROM compute.admissions AS a
         WHERE a.tenant_id = p_tenant_id AND a.method = p_method AND a.idempotency_key = v_key AND a.state IN ('pending', 'admitted');
        IF FOUND THEN
            IF v_existing.request_hash <> v_hash THEN
                PERFORM compute.raise_error('IDEMPOTENCY_MISMATCH',
                    pg_catalog.format('idempotency key %L was used for another request', v_key),
                    'Use a new idempotency_key for a different request.');
            END IF;
            RETURN pg_catalog.jsonb_build_object('admission_id', v_existing.admission_id,
                'iam', compute.iam_request(p_tenant_id, v_method, v_existing.resource_id, v_existing.attributes));
        END IF;
    END IF;

    -- 4. Provisional rows (reservations.create) or a fresh id for a new resource.
    IF v_method.prepare_function IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT %s($1, $2)', v_method.prepare_function::regproc) INTO v_prepared USING p_tenant_id, p_input;
        v_resource_id := v_prepared ->> 'id';
        v_attributes := v_attributes || coalesce(v_prepared -> 'attributes', '{}');
    END IF;
    v_resource_id := coalesce(v_resource_id, pg_catalog.gen_random_uuid()::text);
    INSERT INTO compute.admissions (admission_id, method, tenant_id, resource_id, parent_id, input, attributes, request_hash,
                                    idempotency_key, state, created_at, expires_at)
    VALUES (v_admission, p_method, p_tenant_id, v_resource_id, v_parent_id, p_input, v_attributes, v_hash, v_key, 'pending', v_now,
            v_now + compute.limit('admission_seconds') * interval '1 second');
    RETURN pg_catalog.jsonb_build_object('admission_id', v_admission,
        'iam', compute.iam_request(p_tenant_id, v_method, v_resource_id, v_attributes));
END
$function$;

COMMENT ON FUNCTION api.prepare(text,uuid,jsonb) IS 'Step 1 of admission: validate, write the admission (and provisional rows), answer the IAM request.';

CREATE OR REPLACE FUNCTION compute.api_reservations_extend(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_expected    timestamptz := compute.request_timestamp(p_input, 'expected_end', false);
    v_reservation compute.reservations;
BEGIN
    -- Compare and set: with expected_end, the change applies only to the end the caller saw, so
    -- two clients extending at once cannot undo each other unknowingly.
    IF v_expected IS NOT NULL THEN
        v_reservation := compute.reservation_lock(p_resource_id::uuid);
        IF upper(v_reservation.during) IS DISTINCT FROM v_expected THEN
            PERFORM compute.raise_error('GENERATION_CONFLICT',
                pg_catalog.format('reservation %s ends at %s, not %s', p_resource_id, upper(v_reservation.during), v_expected),
                'Someone changed it meanwhile: read it again (reservations.get) and decide on its current end.');
        END IF;
    END IF;
    RETURN compute.reservation_extend(p_resource_id::uuid, compute.request_timestamp(p_input, 'end', true));
END
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_extend(p_reservation_id uuid, p_new_end timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_renew(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
    -- A lease that lapsed is over, whether or not the expiry sweep has run yet.
    IF v_reservation.hold_until <= compute.compute_now() THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('the lease of reservation %s lapsed at %s', p_reservation_id, v_reservation.hold_until),
            'A lease holds only while it is renewed in time; reserve again.');
    END IF;
    UPDATE compute.reservations SET hold_until = compute.compute_now() + hold_seconds * interval '1 second'
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$function$;

ALTER TABLE api.methods DROP COLUMN check_function;

DROP INDEX compute.admissions_pending_tenant_slot;

DROP INDEX compute.admissions_pending_credential_slot;

ALTER TABLE compute.admissions DROP COLUMN credential_sha256, DROP COLUMN tenant_slot, DROP COLUMN credential_slot;

COMMIT;
