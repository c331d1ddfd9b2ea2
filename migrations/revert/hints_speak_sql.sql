-- Revert better_compute:hints_speak_sql from pg
-- Hints and comments speak SQL and cite the project's docs: no HTTP header or URL in a hint psql users read, docs/architecture.md instead of a design file outside the repository
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

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

CREATE OR REPLACE FUNCTION compute.method_get(p_method text)
 RETURNS api.methods
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_method api.methods;
BEGIN
    SELECT * INTO v_method FROM api.methods AS m WHERE m.method = p_method;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no method %L', p_method),
            'List the methods with SELECT * FROM api.catalog() (or GET /api/compute/openapi.json).');
    END IF;
    RETURN v_method;
END
$function$;

COMMENT ON FUNCTION compute.reservation_document(uuid) IS 'A reservation and its bookings as the API answers (DESIGN §17).';

CREATE OR REPLACE FUNCTION compute.reserve(p_request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
-- Lock order: the idempotency key (unique index), quota rows, devices (SKIP LOCKED, in compute.place).
DECLARE
    v_now        timestamptz := compute.compute_now();
    v_tenant_id  uuid;
    v_project_id uuid;
    v_pool_id    uuid;
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
    v_replay     jsonb;
    v_atoms      uuid[];
    v_fraction   numeric;
BEGIN
    -- 1. The request's fields, each of its type (nothing here depends on the time or on the fleet).
    IF p_request IS NULL OR pg_catalog.jsonb_typeof(p_request) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a reservation request is a JSON object', 'See DESIGN §17 for its fields.');
    END IF;
    v_tenant_id := compute.request_field(p_request, 'tenant_id', 'uuid', true) #>> '{}';
    v_project_id := compute.request_field(p_request, 'project_id', 'uuid', false) #>> '{}';
    v_pool_id := compute.request_field(p_request, 'pool_id', 'uuid', true) #>> '{}';
    v_shape := compute.request_field(p_request, 'shape', 'string', true) #>> '{}';
    v_count := coalesce(compute.request_field(p_request, 'count', 'integer', false)::integer, 1);
    v_start := compute.request_timestamp(p_request, 'start', false);
    v_end := compute.request_timestamp(p_request, 'end', true);
    v_same_node := coalesce((compute.request_field(p_request, 'same_node', 'boolean', false))::boolean, false);
    v_hold := compute.request_field(p_request, 'hold_seconds', 'integer', false)::integer;
    v_key := compute.request_field(p_request, 'idempotency_key', 'string', false) #>> '{}';
    IF length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use 1 to 200 characters, e.g. a uuid.');
    END IF;

    -- 2. Idempotency first: a retry gets the stored answer, even once its window has started or ended.
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
        'tenant_id', v_tenant_id, 'project_id', v_project_id, 'pool_id', v_pool_id, 'shape', v_shape, 'count', v_count,
        'start', extract(epoch FROM v_start), 'end', extract(epoch FROM v_end),
        'same_node', v_same_node, 'hold_seconds', v_hold)::text, 'UTF8')), 'hex');
    v_replay := compute.reservation_replay(v_tenant_id, v_key, v_hash);
    IF v_replay IS NOT NULL THEN
        RETURN v_replay;
    END IF;

    -- 3. The pool (the tenant's: another tenant's pool reads as missing; an operator's site has no
    --    tenant and is the operator's to book), its offering, and the window against now.
    v_pool := compute.pool_get(v_pool_id);
    IF (SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = v_pool.site_id) <> v_tenant_id THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', v_pool_id),
            'List the pools in ops.pool_capacity, or create one with compute.pool_create.');
    END IF;
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
    v_start := coalesce(v_start, v_now);
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
    PERFORM compute.project_check(v_tenant_id, v_project_id);
    PERFORM compute.tenant_ensure(v_tenant_id);
    v_during := tstzrange(v_start, v_end);

    -- 4. Claim the key by inserting the reservation; a concurrent holder of the same key makes us
    --    wait for its commit, then we replay its answer (or report the mismatch).
    INSERT INTO compute.reservations (reservation_id, tenant_id, project_id, site_id, pool_id, shape, count, during, same_node,
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + compute.limit('provisional_seconds') * interval '1 second', v_hold,
            v_now + v_hold * interval '1 second', v_key, v_hash, v_now)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN compute.reservation_replay(v_tenant_id, v_key, v_hash);
    END IF;

    -- 5. Quota rows are locked before any device (lock order); counted once the atoms are known.
    --    Placement checked before booking, so an exclusion violation or a deadlock here is a race
    --    lost to a concurrent booking: CAPACITY_CONFLICT, as the contract names it.
    BEGIN
        PERFORM 1 FROM compute.quotas AS q
         WHERE q.tenant_id = v_tenant_id AND q.pool_id = v_pool.pool_id AND (q.project_id IS NULL OR q.project_id = v_project_id)
         ORDER BY q.quota_id FOR UPDATE;
        v_atoms := compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node);
        INSERT INTO compute.bookings (reservation_id, tenant_id, project_id, site_id, pool_id, node_id, device_id, atom_id,
                                      slices, shares, gpu_fraction, during, state)
        SELECT v_id, v_tenant_id, v_project_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
               a.slices, a.shares, a.gpu_fraction, v_during, 'provisional'
          FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    EXCEPTION WHEN exclusion_violation OR deadlock_detected THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('%s x %s in pool %s were taken by a concurrent reservation', v_count, v_shape, v_pool.name),
            'Try again: placement looks for other free atoms; compute.capacity_earliest finds free windows.');
    END;
    SELECT sum(a.gpu_fraction) INTO v_fraction FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, v_count, v_fraction, v_id);
    RETURN compute.reservation_document(v_id);
END
$function$;

COMMENT ON FUNCTION compute.reserve(jsonb) IS 'Place and book a reservation request (DESIGN §17) as provisional; replays by idempotency key.';

COMMENT ON TABLE compute.error_codes IS 'Error contract: code, SQLSTATE and HTTP status (DESIGN §13).';

COMMIT;
