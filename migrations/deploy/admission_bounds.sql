-- Deploy better_compute:admission_bounds to pg
-- Admissions waiting for their IAM decision are bounded per tenant and per caller credential
-- (numbered slots; limits admissions_pending_per_tenant, admissions_pending_per_credential):
-- api.prepare takes the credential's SHA-256. A repeated idempotency key replays an admission only
-- while api.admit can still find it. reservations.extend and renew check their input in api.prepare
-- (api.methods.check_function), before the decision.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE compute.admissions
    ADD COLUMN credential_sha256 text CHECK (credential_sha256 ~ '^[0-9a-f]{64}$'),
    ADD COLUMN tenant_slot integer,
    ADD COLUMN credential_slot integer;

CREATE UNIQUE INDEX admissions_pending_tenant_slot ON compute.admissions (tenant_id, tenant_slot) WHERE state = 'pending';

CREATE UNIQUE INDEX admissions_pending_credential_slot ON compute.admissions (credential_sha256, credential_slot)
    WHERE state = 'pending' AND credential_sha256 IS NOT NULL;

ALTER TABLE api.methods
    ADD COLUMN check_function regprocedure,
    ADD CONSTRAINT methods_check_function_of_mutation CHECK (kind = 'mutation' OR check_function IS NULL);

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION api.prepare(p_method text, p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT api.prepare(p_method, p_tenant_id, p_input, NULL::text);
$function$;

COMMENT ON FUNCTION api.prepare(text,uuid,jsonb) IS 'api.prepare without a credential (ops.call, callers that have none): bounded per tenant only.';

CREATE OR REPLACE FUNCTION api.prepare(p_method text, p_tenant_id uuid, p_input jsonb, p_credential_sha256 text)
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
    v_tenant_slot integer;
    v_credential_slot integer;
BEGIN
    -- 1. The method, the tenant, the caller's credential (its SHA-256, as the relay sends it) and the input's shape.
    v_method := compute.method_get(p_method);
    IF p_tenant_id IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'no tenant', 'Send X-Tenant-Id (the Better IAM tenant you act in).');
    END IF;
    IF p_credential_sha256 !~ '^[0-9a-f]{64}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the credential fingerprint is not a SHA-256',
            'Pass the lowercase hex SHA-256 of the caller''s bearer token (64 characters), or NULL.');
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

    -- 3. Idempotency: one admission per key (serialised on the key), replayed for the same request
    --    while admit can still find it: a decided one no later than admission_seconds before the
    --    expiry sweep may prune it, a pending one until it expires. Older ones are ended here (their
    --    key is free again) and the request is admitted anew.
    v_key := compute.input_text(p_input, 'idempotency_key', false);
    IF v_key IS NOT NULL AND length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use a uuid.');
    END IF;
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(p_method || ' ' || v_attributes::text, 'UTF8')), 'hex');
    IF v_key IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(p_tenant_id::text || '/' || p_method || '/' || v_key, 0));
        SELECT * INTO v_existing FROM compute.admissions AS a
         WHERE a.tenant_id = p_tenant_id AND a.method = p_method AND a.idempotency_key = v_key AND a.state IN ('pending', 'admitted')
           FOR UPDATE;
        IF FOUND AND v_existing.request_hash <> v_hash THEN
            PERFORM compute.raise_error('IDEMPOTENCY_MISMATCH',
                pg_catalog.format('idempotency key %L was used for another request', v_key),
                'Use a new idempotency_key for a different request.');
        ELSIF FOUND AND v_existing.state = 'pending' AND v_existing.expires_at <= v_now THEN
            PERFORM compute.admission_end(v_existing, 'expired', NULL);
        ELSIF FOUND AND v_existing.state = 'admitted' AND v_existing.decided_at < v_now
                  - (compute.limit('admission_retention_seconds') - compute.limit('admission_seconds')) * interval '1 second' THEN
            DELETE FROM compute.admissions AS a WHERE a.admission_id = v_existing.admission_id;
        ELSIF FOUND THEN
            RETURN pg_catalog.jsonb_build_object('admission_id', v_existing.admission_id,
                'iam', compute.iam_request(p_tenant_id, v_method, v_existing.resource_id, v_existing.attributes));
        END IF;
    END IF;

    -- 4. What the input asks of the resource as it is now (reservations.extend, renew).
    IF v_method.check_function IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT %s($1, $2, $3)', v_method.check_function::regproc) USING p_tenant_id, v_resource_id, p_input;
    END IF;

    -- 5. A slot of the tenant's and of the credential's pending admissions, before anything is held:
    --    requests whose caller IAM has not decided on yet hold at most that many admissions.
    v_tenant_slot := compute.admission_slot(p_tenant_id, NULL);
    IF v_tenant_slot IS NULL THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED',
            pg_catalog.format('this tenant has %s requests waiting for their IAM decision', compute.limit('admissions_pending_per_tenant')),
            'Send the request again in a few seconds (admissions_pending_per_tenant in ops.limits).');
    END IF;
    IF p_credential_sha256 IS NOT NULL THEN
        v_credential_slot := compute.admission_slot(p_tenant_id, p_credential_sha256);
        IF v_credential_slot IS NULL THEN
            PERFORM compute.raise_error('QUOTA_EXCEEDED',
                pg_catalog.format('this credential has %s requests waiting for their IAM decision', compute.limit('admissions_pending_per_credential')),
                'Wait for an answer before sending more (admissions_pending_per_credential in ops.limits).');
        END IF;
    END IF;

    -- 6. Provisional rows (reservations.create) or a fresh id for a new resource.
    IF v_method.prepare_function IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT %s($1, $2)', v_method.prepare_function::regproc) INTO v_prepared USING p_tenant_id, p_input;
        v_resource_id := v_prepared ->> 'id';
        v_attributes := v_attributes || coalesce(v_prepared -> 'attributes', '{}');
    END IF;
    v_resource_id := coalesce(v_resource_id, pg_catalog.gen_random_uuid()::text);
    INSERT INTO compute.admissions (admission_id, method, tenant_id, resource_id, parent_id, input, attributes, request_hash,
                                    idempotency_key, state, created_at, expires_at, credential_sha256, tenant_slot, credential_slot)
    VALUES (v_admission, p_method, p_tenant_id, v_resource_id, v_parent_id, p_input, v_attributes, v_hash, v_key, 'pending', v_now,
            v_now + compute.limit('admission_seconds') * interval '1 second', p_credential_sha256, v_tenant_slot, v_credential_slot);
    RETURN pg_catalog.jsonb_build_object('admission_id', v_admission,
        'iam', compute.iam_request(p_tenant_id, v_method, v_resource_id, v_attributes));
END
$function$;

COMMENT ON FUNCTION api.prepare(text,uuid,jsonb,text) IS 'Step 1 of admission: validate, write the admission (and provisional rows), answer the IAM request; pending admissions bounded per tenant and credential.';

GRANT EXECUTE ON FUNCTION api.prepare(text,uuid,jsonb,text) TO bc_api;

CREATE OR REPLACE FUNCTION compute.admission_slot(p_tenant_id uuid, p_credential text)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
-- The lowest free slot of the tenant's pending admissions (p_credential NULL), else of the
-- credential's: from 1 to the bound, one that no pending admission holds and no transaction in
-- flight is taking (an advisory lock per slot, tried, never waited for, taken only on a slot that
-- looks free). NULL when every slot is taken.
DECLARE
    v_owner text := coalesce(p_credential, p_tenant_id::text);
    v_limit bigint := compute.limit(CASE WHEN p_credential IS NULL THEN 'admissions_pending_per_tenant'
                                         ELSE 'admissions_pending_per_credential' END);
BEGIN
    FOR v_slot IN 1..v_limit LOOP
        IF NOT compute.admission_slot_held(p_tenant_id, p_credential, v_slot)
           AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended('admission-slot/' || v_owner || '/' || v_slot, 0)) THEN
            -- A slot that looked free may have been committed by its taker since: read it again.
            IF NOT compute.admission_slot_held(p_tenant_id, p_credential, v_slot) THEN
                RETURN v_slot;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.admission_slot(uuid,text) IS 'A free pending-admission slot of a tenant (credential NULL) or of a credential; NULL when all are taken.';

CREATE OR REPLACE FUNCTION compute.admission_slot_held(p_tenant_id uuid, p_credential text, p_slot integer)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF p_credential IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM compute.admissions AS a
                        WHERE a.state = 'pending' AND a.tenant_id = p_tenant_id AND a.tenant_slot = p_slot);
    END IF;
    RETURN EXISTS (SELECT 1 FROM compute.admissions AS a
                    WHERE a.state = 'pending' AND a.credential_sha256 = p_credential AND a.credential_slot = p_slot);
END
$function$;

COMMENT ON FUNCTION compute.admission_slot_held(uuid,text,integer) IS 'Whether a pending admission holds a slot of the tenant (credential NULL) or of the credential.';

CREATE OR REPLACE FUNCTION compute.api_reservations_extend(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Compare and set with expected_end, under the row lock (compute.reservation_extend_check).
    PERFORM compute.reservation_extend_check(compute.reservation_lock(p_resource_id::uuid),
        compute.request_timestamp(p_input, 'end', true), compute.request_timestamp(p_input, 'expected_end', false));
    RETURN compute.reservation_extend(p_resource_id::uuid, compute.request_timestamp(p_input, 'end', true));
END
$function$;

CREATE OR REPLACE FUNCTION compute.api_reservations_extend_check(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS void
 LANGUAGE sql
 STABLE
AS $function$
    SELECT compute.reservation_extend_check(r, compute.request_timestamp(p_input, 'end', true),
                                            compute.request_timestamp(p_input, 'expected_end', false))
      FROM compute.reservations AS r WHERE r.reservation_id = p_resource_id::uuid;
$function$;

COMMENT ON FUNCTION compute.api_reservations_extend_check(uuid,text,jsonb) IS 'reservations.extend, before the decision: the new end is one the reservation may take.';

CREATE OR REPLACE FUNCTION compute.api_reservations_renew_check(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS void
 LANGUAGE sql
 STABLE
AS $function$
    SELECT compute.reservation_renew_check(r) FROM compute.reservations AS r WHERE r.reservation_id = p_resource_id::uuid;
$function$;

COMMENT ON FUNCTION compute.api_reservations_renew_check(uuid,text,jsonb) IS 'reservations.renew, before the decision: the lease may be renewed.';

CREATE OR REPLACE FUNCTION compute.reservation_extend(p_reservation_id uuid, p_new_end timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
-- Lock order: the reservation row, quota rows, devices (FOR UPDATE, device_id order).
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
    v_during      tstzrange;
    v_fraction    numeric;
    v_conflict    boolean;
BEGIN
    PERFORM compute.reservation_extend_check(v_reservation, p_new_end, NULL);
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

CREATE OR REPLACE FUNCTION compute.reservation_extend_check(p_reservation compute.reservations, p_new_end timestamp with time zone, p_expected_end timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
    v_max interval;
BEGIN
    -- What an extension needs besides free atoms and quota: api.prepare asks it before the IAM
    -- decision (on the row as it reads), compute.reservation_extend again under the row lock.
    -- With expected_end, the change applies only to the end the caller saw (compare and set), so
    -- two clients extending at once cannot undo each other unknowingly.
    IF p_expected_end IS NOT NULL AND upper(p_reservation.during) IS DISTINCT FROM p_expected_end THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT',
            pg_catalog.format('reservation %s ends at %s, not %s', p_reservation.reservation_id, upper(p_reservation.during), p_expected_end),
            'Someone changed it meanwhile: read it again (reservations.get) and decide on its current end.');
    END IF;
    IF p_reservation.state NOT IN ('provisional', 'active') OR upper(p_reservation.during) <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s has ended', p_reservation.reservation_id),
            'Reserve again for a new window.');
    END IF;
    IF p_new_end IS NULL OR p_new_end <= greatest(lower(p_reservation.during), v_now) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the new end must come after the start and after now',
            'To end a reservation now, release it.');
    END IF;
    SELECT least(o.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') INTO v_max
      FROM compute.offerings AS o
     WHERE o.pool_id = p_reservation.pool_id AND o.shape = p_reservation.shape AND o.instance_kind = 'devices';
    IF p_new_end - lower(p_reservation.during) > coalesce(v_max, interval '0') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the extended window is too long', pg_catalog.format('Windows of this offering last at most %s.', v_max));
    END IF;
END
$function$;

COMMENT ON FUNCTION compute.reservation_extend_check(compute.reservations,timestamp with time zone,timestamp with time zone) IS 'INVALID_ARGUMENT (or GENERATION_CONFLICT) unless a reservation may be extended to the new end.';

CREATE OR REPLACE FUNCTION compute.reservation_renew(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_reservation compute.reservations := compute.reservation_lock(p_reservation_id);
BEGIN
    PERFORM compute.reservation_renew_check(v_reservation);
    UPDATE compute.reservations SET hold_until = compute.compute_now() + hold_seconds * interval '1 second'
     WHERE reservation_id = p_reservation_id;
    RETURN compute.reservation_document(p_reservation_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_renew_check(p_reservation compute.reservations)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- api.prepare asks this before the IAM decision, compute.reservation_renew again under the row lock.
    IF p_reservation.hold_seconds IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s holds without a lease', p_reservation.reservation_id),
            'Only reservations made with hold_seconds are renewed.');
    END IF;
    IF p_reservation.state NOT IN ('provisional', 'active') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s is %s', p_reservation.reservation_id, p_reservation.state),
            'Reserve again.');
    END IF;
    -- A lease that lapsed is over, whether or not the expiry sweep has run yet.
    IF p_reservation.hold_until <= compute.compute_now() THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('the lease of reservation %s lapsed at %s', p_reservation.reservation_id, p_reservation.hold_until),
            'A lease holds only while it is renewed in time; reserve again.');
    END IF;
END
$function$;

COMMENT ON FUNCTION compute.reservation_renew_check(compute.reservations) IS 'INVALID_ARGUMENT (or CAPACITY_CONFLICT once lapsed) unless a reservation''s lease may be renewed.';

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('admissions_pending_per_tenant',   256, 'count',   'Admissions waiting for their IAM decision, per tenant (more: QUOTA_EXCEEDED before anything is held).'),
    ('admissions_pending_per_credential', 16, 'count',  'Admissions waiting for their IAM decision, per caller credential (more: QUOTA_EXCEEDED before anything is held).');

UPDATE api.methods SET check_function = 'compute.api_reservations_extend_check(uuid, text, jsonb)' WHERE method = 'reservations.extend';

UPDATE api.methods SET check_function = 'compute.api_reservations_renew_check(uuid, text, jsonb)' WHERE method = 'reservations.renew';

COMMIT;
