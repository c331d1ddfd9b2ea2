-- Admission (docs/architecture.md §7, P7, P11): one IAM decision per request, made on the exact request.
--   api.prepare  validate, check the resource is the tenant's, write the admission (and the
--                provisional rows of a method with a prepare_function); answer the IAM request
--   (relay)      asks the IAM port once; timeout or error = deny
--   api.admit    allow: apply the mutation, audit it, emit its event, in one transaction;
--                deny: void the provisional rows, audit the denial
--   api.read     a read after an allow; a denied read is audited
-- An admission never admitted (its relay died) is voided by compute.admissions_expire (worker sweep)
-- after admission_seconds. Idempotency: (tenant, method, idempotency_key) of a pending or admitted
-- admission answers that admission; another request under the same key is IDEMPOTENCY_MISMATCH.
-- Pending admissions are bounded per tenant and per caller credential (admissions_pending_per_*):
-- each pending admission holds a numbered slot of its tenant and of its credential, so provisional
-- rows written before IAM has said who the caller is stay within those bounds, exactly.
-- Lock order: the idempotency key (advisory, transaction), the admission row, the slots (advisory,
-- transaction, never waited for), then what the method's functions lock (reservation, quota rows,
-- devices).
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.admissions (
    admission_id    uuid CONSTRAINT admissions_pkey PRIMARY KEY,
    method          text NOT NULL CONSTRAINT admissions_method_fkey REFERENCES api.methods,
    tenant_id       uuid NOT NULL,
    resource_id     text NOT NULL CONSTRAINT admissions_resource_id_check CHECK (length(resource_id) BETWEEN 1 AND 100),
    parent_id       text,
    input           jsonb NOT NULL,
    attributes      jsonb NOT NULL,
    request_hash    text NOT NULL,
    idempotency_key text CONSTRAINT admissions_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    state           text NOT NULL CONSTRAINT admissions_state_check CHECK (state IN ('pending', 'admitted', 'denied', 'expired')),
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_at      timestamptz,
    principal       text,
    decision        jsonb,
    result          jsonb,
    audit_event_id  bigint,
    credential_sha256 text CONSTRAINT admissions_credential_sha256_check CHECK (credential_sha256 ~ '^[0-9a-f]{64}$'),
    tenant_slot     integer,
    credential_slot integer,
    CONSTRAINT admissions_pending_until_decided CHECK ((state = 'pending') = (decided_at IS NULL))
);
CREATE UNIQUE INDEX admissions_idempotency ON compute.admissions (tenant_id, method, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'admitted');
CREATE INDEX admissions_pending ON compute.admissions (expires_at) WHERE state = 'pending';
CREATE INDEX admissions_pending_resource ON compute.admissions (resource_id) WHERE state = 'pending';
CREATE INDEX admissions_decided ON compute.admissions (decided_at) WHERE state <> 'pending';
CREATE UNIQUE INDEX admissions_pending_tenant_slot ON compute.admissions (tenant_id, tenant_slot) WHERE state = 'pending';
CREATE UNIQUE INDEX admissions_pending_credential_slot ON compute.admissions (credential_sha256, credential_slot)
    WHERE state = 'pending' AND credential_sha256 IS NOT NULL;
COMMENT ON TABLE compute.admissions IS 'One row per mutation request: the exact request IAM decides on, the decision, the result (for idempotent replays).';

-- -- resources: whose is it, what is it ------------------------------------------------------------

CREATE FUNCTION compute.resource_describe(p_type text, p_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
-- {"tenantId", "parent": {"type", "id"} | null, "attributes"} of an existing resource; NULL when
-- there is none (or the id is not an id of that type). Sites without a tenant are nobody's here.
DECLARE
    v_uuid uuid;
BEGIN
    IF p_type = 'compute-audit-event' THEN
        RETURN (SELECT pg_catalog.jsonb_build_object('tenantId', e.tenant_id, 'parent', NULL,
                           'attributes', pg_catalog.jsonb_build_object('action', e.action))
                  FROM compute.audit_events AS e
                 WHERE p_id ~ '^[0-9]{1,18}$' AND e.event_id = p_id::bigint);
    END IF;
    IF p_id IS NULL OR p_id !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN NULL;
    END IF;
    v_uuid := p_id::uuid;
    RETURN CASE p_type
        WHEN 'compute-site' THEN
            (SELECT compute.resource_json(s.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', s.name))
               FROM compute.sites AS s WHERE s.site_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-pool' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-site', s.site_id::text,
                        pg_catalog.jsonb_build_object('name', p.name, 'gpu_model', p.gpu_model, 'placement_policy', p.placement_policy))
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-quota' THEN  -- a quota is named by its pool (and the project in its attributes)
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', p.pool_id::text, '{}')
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-offering' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', o.pool_id::text,
                        pg_catalog.jsonb_build_object('shape', o.shape))
               FROM compute.offerings AS o JOIN compute.pools AS p ON p.pool_id = o.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE o.offering_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-node' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', n.pool_id::text, pg_catalog.jsonb_build_object('name', n.name))
               FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
              WHERE n.node_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-join-token' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', j.pool_id::text, pg_catalog.jsonb_build_object('state', j.state))
               FROM compute.join_tokens AS j JOIN compute.pools AS p ON p.pool_id = j.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE j.token_id = v_uuid)
        WHEN 'compute-project' THEN
            (SELECT compute.resource_json(p.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', p.name))
               FROM compute.projects AS p WHERE p.project_id = v_uuid)
        WHEN 'compute-reservation' THEN
            (SELECT compute.resource_json(r.tenant_id, 'compute-pool', r.pool_id::text,
                        pg_catalog.jsonb_build_object('state', r.state, 'shape', r.shape, 'count', r.count, 'project_id', r.project_id))
               FROM compute.reservations AS r WHERE r.reservation_id = v_uuid)
        WHEN 'compute-instance' THEN
            (SELECT compute.resource_json(i.tenant_id, 'compute-pool', i.pool_id::text,
                        pg_catalog.jsonb_build_object('state', i.state, 'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib,
                                                      'project_id', i.project_id))
               FROM compute.instances AS i WHERE i.instance_id = v_uuid)
        WHEN 'compute-machine' THEN  -- sql/700_machines.sql
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', m.pool_id::text,
                        pg_catalog.jsonb_build_object('name', m.name, 'state', m.state))
               FROM compute.machines AS m JOIN compute.sites AS s ON s.site_id = m.site_id
              WHERE m.machine_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-webhook' THEN
            (SELECT compute.resource_json(w.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('active', w.active))
               FROM compute.webhooks AS w WHERE w.webhook_id = v_uuid)
        END;
END
$$;
COMMENT ON FUNCTION compute.resource_describe(text, text) IS 'Tenant, parent and attributes of an existing resource (NULL when none): what Better IAM''s resolver gets.';

CREATE FUNCTION compute.resource_json(p_tenant_id uuid, p_parent_type text, p_parent_id text, p_attributes jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('tenantId', p_tenant_id,
        'parent', CASE WHEN p_parent_type IS NOT NULL THEN pg_catalog.jsonb_build_object('type', p_parent_type, 'id', p_parent_id) END,
        'attributes', p_attributes);
$$;
COMMENT ON FUNCTION compute.resource_json(uuid, text, text, jsonb) IS 'The resolver''s answer for one resource.';

CREATE FUNCTION compute.resource_require(p_tenant_id uuid, p_type text, p_id text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Another tenant's resource answers exactly like a missing one: NOT_FOUND, nothing about it.
    IF (compute.resource_describe(p_type, p_id) ->> 'tenantId') IS DISTINCT FROM p_tenant_id::text THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no %s %s', pg_catalog.substr(p_type, 9), p_id),
            pg_catalog.format('List what this tenant has (%s.list).', CASE p_type WHEN 'compute-join-token' THEN 'joinTokens'
                WHEN 'compute-audit-event' THEN 'events' WHEN 'compute-quota' THEN 'pools'
                ELSE pg_catalog.replace(pg_catalog.substr(p_type, 9), '-', '_') || 's' END));
    END IF;
END
$$;
COMMENT ON FUNCTION compute.resource_require(uuid, text, text) IS 'NOT_FOUND unless the resource exists and is the tenant''s.';

-- -- prepare ----------------------------------------------------------------------------------------

CREATE FUNCTION compute.iam_attributes(p_method api.methods, p_attributes jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    -- Secrets stay out of what IAM sees (the authorize request, the resolver): a field the catalog
    -- marks writeOnly (webhooks.create's secret, sealed or not) is left out. Policies never read them.
    SELECT p_attributes - ARRAY(SELECT p.key FROM pg_catalog.jsonb_each(p_method.input_schema -> 'properties') AS p
                                 WHERE p.value -> 'writeOnly' = 'true'::jsonb);
$$;
COMMENT ON FUNCTION compute.iam_attributes(api.methods, jsonb) IS 'A request''s attributes as IAM sees them: without the fields the catalog marks writeOnly (secrets).';

CREATE FUNCTION compute.iam_request(p_tenant_id uuid, p_method api.methods, p_resource_id text, p_attributes jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('tenantId', p_tenant_id, 'action', p_method.action,
        'resource', pg_catalog.jsonb_build_object('type', p_method.resource_type, 'id', p_resource_id),
        'attributes', compute.iam_attributes(p_method, p_attributes));
$$;
COMMENT ON FUNCTION compute.iam_request(uuid, api.methods, text, jsonb) IS 'The IAM request of a method on a resource (Better IAM''s authorize body), secrets left out.';

CREATE FUNCTION compute.admission_slot(p_tenant_id uuid, p_credential text)
RETURNS integer
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.admission_slot(uuid, text) IS 'A free pending-admission slot of a tenant (credential NULL) or of a credential; NULL when all are taken.';

CREATE FUNCTION compute.admission_slot_held(p_tenant_id uuid, p_credential text, p_slot integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_credential IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM compute.admissions AS a
                        WHERE a.state = 'pending' AND a.tenant_id = p_tenant_id AND a.tenant_slot = p_slot);
    END IF;
    RETURN EXISTS (SELECT 1 FROM compute.admissions AS a
                    WHERE a.state = 'pending' AND a.credential_sha256 = p_credential AND a.credential_slot = p_slot);
END
$$;
COMMENT ON FUNCTION compute.admission_slot_held(uuid, text, integer) IS 'Whether a pending admission holds a slot of the tenant (credential NULL) or of the credential.';

CREATE FUNCTION api.prepare(p_method text, p_tenant_id uuid, p_input jsonb, p_credential_sha256 text)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = ''
AS $$
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
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'no tenant', 'Pass p_tenant_id: the Better IAM tenant you act in.');
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
$$;
COMMENT ON FUNCTION api.prepare(text, uuid, jsonb, text) IS 'Step 1 of admission: validate, write the admission (and provisional rows), answer the IAM request; pending admissions bounded per tenant and credential.';

CREATE FUNCTION api.prepare(p_method text, p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = ''
AS $$
    SELECT api.prepare(p_method, p_tenant_id, p_input, NULL::text);
$$;
COMMENT ON FUNCTION api.prepare(text, uuid, jsonb) IS 'api.prepare without a credential (ops.call, callers that have none): bounded per tenant only.';

-- -- admit ------------------------------------------------------------------------------------------

CREATE FUNCTION compute.decision_allowed(p_decision jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    -- Fail closed (P11): only a JSON true allows; a missing, null or odd answer denies.
    SELECT coalesce(p_decision -> 'allowed' = 'true'::jsonb, false);
$$;
COMMENT ON FUNCTION compute.decision_allowed(jsonb) IS 'true only when the decision says allowed: true.';

CREATE FUNCTION compute.error_answer(p_code text, p_message text, p_hint text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('error', pg_catalog.jsonb_build_object('code', p_code, 'message', p_message, 'hint', p_hint));
$$;
COMMENT ON FUNCTION compute.error_answer(text, text, text) IS 'The error envelope, for answers that must commit (a deny voids rows).';

CREATE FUNCTION compute.denial(p_method api.methods, p_decision jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT compute.error_answer('ACCESS_DENIED', 'denied: ' || coalesce(p_decision ->> 'reason', 'no reason given'),
                                'Ask your administrator for the permission ' || p_method.action || '.');
$$;
COMMENT ON FUNCTION compute.denial(api.methods, jsonb) IS 'The answer to a denied request: ACCESS_DENIED with IAM''s reason.';

CREATE FUNCTION compute.admission_end(p_admission compute.admissions, p_state text, p_decision jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_method api.methods := compute.method_get(p_admission.method);
BEGIN
    IF v_method.void_function IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT %s($1)', v_method.void_function::regproc) USING p_admission.resource_id;
    END IF;
    UPDATE compute.admissions SET state = p_state, decided_at = compute.compute_now(), decision = p_decision,
                                  principal = p_decision ->> 'principal'
     WHERE admission_id = p_admission.admission_id;
END
$$;
COMMENT ON FUNCTION compute.admission_end(compute.admissions, text, jsonb) IS 'End an admission without effect (denied or expired): void its provisional rows.';

CREATE FUNCTION api.admit(p_admission_id uuid, p_decision jsonb)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = ''
AS $$
DECLARE
    v_now       timestamptz := compute.compute_now();
    v_admission compute.admissions;
    v_method    api.methods;
    v_allowed   boolean := compute.decision_allowed(p_decision);
    v_principal text := coalesce(p_decision ->> 'principal', 'unknown');
    v_result    jsonb;
    v_audit_id  bigint;
BEGIN
    SELECT * INTO v_admission FROM compute.admissions AS a WHERE a.admission_id = p_admission_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no admission %s', p_admission_id), 'Call api.prepare first.');
    END IF;
    v_method := compute.method_get(v_admission.method);

    -- 1. A replay of an admitted request answers its stored result (after its own allow).
    IF v_admission.state = 'admitted' THEN
        IF NOT v_allowed THEN
            RETURN compute.denial(v_method, p_decision);
        END IF;
        RETURN pg_catalog.jsonb_build_object('data', v_admission.result);
    END IF;
    IF v_admission.state <> 'pending' OR v_admission.expires_at <= v_now THEN
        IF v_admission.state = 'pending' THEN
            PERFORM compute.admission_end(v_admission, 'expired', p_decision);
        END IF;
        RETURN compute.error_answer('FENCED', pg_catalog.format('admission %s is %s', p_admission_id,
                                    CASE v_admission.state WHEN 'pending' THEN 'expired' ELSE v_admission.state END),
                                    'The decision came too late or twice: send the request again.');
    END IF;

    -- 2. Deny: void the provisional rows, audit the denial.
    IF NOT v_allowed THEN
        PERFORM compute.admission_end(v_admission, 'denied', p_decision);
        PERFORM compute.audit_record(v_admission.tenant_id, v_principal, v_method.action, v_method.resource_type,
            v_admission.resource_id, 'deny', p_decision ->> 'reason', coalesce(p_decision -> 'matched', '[]'),
            v_admission.request_hash, pg_catalog.jsonb_build_object('method', v_method.method, 'admission_id', p_admission_id));
        RETURN compute.denial(v_method, p_decision);
    END IF;

    -- 3. Allow: apply, audit, event; all or nothing. (Secrets a method answers once, a join token's
    --    or a webhook's, are neither stored for replays nor put in the event.)
    PERFORM pg_catalog.set_config('bc.principal', v_principal, true);
    EXECUTE pg_catalog.format('SELECT %s($1, $2, $3)', v_method.function::regproc) INTO v_result
        USING v_admission.tenant_id, v_admission.resource_id, v_admission.input;
    v_audit_id := compute.audit_record(v_admission.tenant_id, v_principal, v_method.action, v_method.resource_type,
        v_admission.resource_id, 'allow', p_decision ->> 'reason', coalesce(p_decision -> 'matched', '[]'),
        v_admission.request_hash, pg_catalog.jsonb_build_object('method', v_method.method, 'admission_id', p_admission_id,
                                                                'parent_id', v_admission.parent_id));
    IF v_method.event_type IS NOT NULL THEN
        PERFORM compute.outbox_emit(v_admission.tenant_id, pg_catalog.substr(v_method.resource_type, 9), v_admission.resource_id,
                                    v_method.event_type, v_result - 'token' - 'secret');
    END IF;
    UPDATE compute.admissions SET state = 'admitted', decided_at = v_now, decision = p_decision, principal = v_principal,
                                  result = v_result - 'token' - 'secret', audit_event_id = v_audit_id
     WHERE admission_id = p_admission_id;
    RETURN pg_catalog.jsonb_build_object('data', v_result);
END
$$;
COMMENT ON FUNCTION api.admit(uuid, jsonb) IS 'Step 3 of admission: on allow apply + audit + event in one transaction; on deny void + audit; answers {data} or {error}.';

-- -- read, resolve ----------------------------------------------------------------------------------

CREATE FUNCTION api.read(p_method text, p_tenant_id uuid, p_input jsonb, p_decision jsonb)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = ''
AS $$
-- Answers {data} or {error} like api.admit: a deny must commit, with its audit event. Allowed reads
-- are not audited (their volume; docs/api.md says what is).
DECLARE
    v_method api.methods := compute.method_get(p_method);
    v_result jsonb;
BEGIN
    IF v_method.kind <> 'read' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is a mutation', p_method), 'Admit it with api.admit.');
    END IF;
    IF NOT compute.decision_allowed(p_decision) THEN
        PERFORM compute.audit_record(p_tenant_id, coalesce(p_decision ->> 'principal', 'unknown'), v_method.action,
            v_method.resource_type, coalesce(p_input ->> v_method.resource_key, '*'), 'deny', p_decision ->> 'reason',
            coalesce(p_decision -> 'matched', '[]'), NULL, pg_catalog.jsonb_build_object('method', v_method.method));
        RETURN compute.denial(v_method, p_decision);
    END IF;
    PERFORM compute.input_check(v_method.input_schema, p_input);
    EXECUTE pg_catalog.format('SELECT %s($1, $2)', v_method.function::regproc) INTO v_result USING p_tenant_id, p_input;
    RETURN pg_catalog.jsonb_build_object('data', v_result);
END
$$;
COMMENT ON FUNCTION api.read(text, uuid, jsonb, jsonb) IS 'A read method after its decision, scoped to the tenant: {data} on allow; on deny audits it and answers {error} (ACCESS_DENIED).';

CREATE FUNCTION api.resolve(p_type text, p_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
DECLARE
    v_answer jsonb := compute.resource_describe(p_type, p_id);
BEGIN
    IF v_answer IS NULL THEN  -- a resource being created: its pending admission is the provisional row
        SELECT compute.resource_json(a.tenant_id, m.parent_type, a.parent_id, compute.iam_attributes(m, a.attributes) || '{"provisional": true}')
          INTO v_answer
          FROM compute.admissions AS a JOIN api.methods AS m ON m.method = a.method
         WHERE a.resource_id = p_id AND a.state = 'pending' AND m.resource_type = p_type
         ORDER BY a.created_at DESC LIMIT 1;
    END IF;
    IF v_answer IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no %s %s', p_type, p_id), 'Resolve only ids Better Compute issued.');
    END IF;
    RETURN v_answer;
END
$$;
COMMENT ON FUNCTION api.resolve(text, text) IS 'Better IAM''s resolveResource: tenant, parent and attributes of a resource, provisional ones included (secrets left out).';

-- -- expiry -----------------------------------------------------------------------------------------

CREATE FUNCTION compute.admissions_expire()
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_admission compute.admissions;
    v_count     integer := 0;
BEGIN
    -- Pending past their bound: the relay died between prepare and admit. SKIP LOCKED: an admit in
    -- flight keeps its row; it sees the expiry itself.
    FOR v_admission IN
        SELECT * FROM compute.admissions AS a WHERE a.state = 'pending' AND a.expires_at <= compute.compute_now()
         ORDER BY a.expires_at LIMIT compute.limit('sweep_batch') FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM compute.admission_end(v_admission, 'expired', NULL);
        v_count := v_count + 1;
    END LOOP;
    -- Decided admissions are kept for idempotent replays, then pruned.
    DELETE FROM compute.admissions AS a
     WHERE a.admission_id IN (SELECT x.admission_id FROM compute.admissions AS x
                               WHERE x.state <> 'pending'
                                 AND x.decided_at < compute.compute_now() - compute.limit('admission_retention_seconds') * interval '1 second'
                               LIMIT compute.limit('sweep_batch'));
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION compute.admissions_expire() IS 'Sweep: end admissions never admitted (void their provisional rows); prune old decided ones.';
