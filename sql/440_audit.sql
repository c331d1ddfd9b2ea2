-- Audit (docs/architecture.md §10): one audit_events row per admitted mutation (the admission path writes
-- them), and per tenant per hour a Merkle tree over that hour's events with a checkpoint signed by
-- the worker's Ed25519 key (public keys in compute.audit_keys). compute.audit_proof(event_id)
-- returns an inclusion proof; `better-compute audit verify` checks proofs and signatures offline.
--
-- The tree (RFC 6962 style): leaf = sha256(0x00 || event text), node = sha256(0x01 || left || right),
-- leaves in event_id order, an odd node at the end of a level is carried up unchanged. The event
-- text is the event row as jsonb text: PostgreSQL's own canonical form, exported as is.
--
-- An event belongs to the hour of its transaction's start, so a transaction that began before the
-- hour closed may still be writing into it while the worker signs that hour. The tenant-hour lock
-- (compute.audit_hour_lock) keeps the two apart: recording takes it shared and refuses an hour
-- already checkpointed; storing a checkpoint takes it exclusively, so it waits for those writers
-- and then finds the root changed (GENERATION_CONFLICT) instead of signing a root without them.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.audit_events (
    event_id      bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT audit_events_pkey PRIMARY KEY,
    tenant_id     uuid NOT NULL,
    occurred_at   timestamptz NOT NULL,
    principal     text NOT NULL,
    action        text NOT NULL,
    resource_type text NOT NULL,
    resource_id   text,
    decision      text NOT NULL CONSTRAINT audit_events_decision_check CHECK (decision IN ('allow', 'deny')),
    reason        text,
    matched       jsonb NOT NULL DEFAULT '[]',
    request_hash  text,
    context       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_tenant_time ON compute.audit_events (tenant_id, occurred_at, event_id);
COMMENT ON TABLE compute.audit_events IS 'One row per admitted mutation, with its admission context.';

CREATE TABLE compute.audit_keys (
    key_id     text CONSTRAINT audit_keys_pkey PRIMARY KEY CONSTRAINT audit_keys_key_id_check CHECK (length(key_id) BETWEEN 1 AND 100),
    public_key bytea NOT NULL CONSTRAINT audit_keys_public_key_key UNIQUE CONSTRAINT audit_keys_public_key_check CHECK (octet_length(public_key) = 32),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.audit_keys IS 'Ed25519 public keys of the workers that sign audit checkpoints.';

CREATE TABLE compute.audit_checkpoints (
    tenant_id  uuid NOT NULL,
    hour       timestamptz NOT NULL CONSTRAINT audit_checkpoints_hour_check CHECK (hour = pg_catalog.date_trunc('hour', hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'),
    leaf_count integer NOT NULL CONSTRAINT audit_checkpoints_leaf_count_check CHECK (leaf_count > 0),
    root       bytea NOT NULL CONSTRAINT audit_checkpoints_root_check CHECK (octet_length(root) = 32),
    key_id     text NOT NULL CONSTRAINT audit_checkpoints_key_id_fkey REFERENCES compute.audit_keys,
    signature  bytea NOT NULL CONSTRAINT audit_checkpoints_signature_check CHECK (octet_length(signature) = 64),
    created_at timestamptz NOT NULL,
    CONSTRAINT audit_checkpoints_pkey PRIMARY KEY (tenant_id, hour)
);
COMMENT ON TABLE compute.audit_checkpoints IS 'Per tenant per hour: Merkle root of the hour''s audit events, signed (Ed25519).';

CREATE FUNCTION compute.audit_hour_lock(p_tenant_id uuid, p_hour timestamptz, p_exclusive boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- Two-key advisory locks: a key space apart from the one-key locks (e.g. the migration lock).
    IF p_exclusive THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(p_tenant_id::text),
                                                 (extract(epoch FROM p_hour) / 3600)::integer);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext(p_tenant_id::text),
                                                        (extract(epoch FROM p_hour) / 3600)::integer);
    END IF;
END
$$;
COMMENT ON FUNCTION compute.audit_hour_lock(uuid, timestamptz, boolean) IS
    'Lock a tenant-hour of audit events until the transaction ends: shared to record into it, exclusive to checkpoint it.';

CREATE FUNCTION compute.audit_record(p_tenant_id uuid, p_principal text, p_action text, p_resource_type text, p_resource_id text,
                                     p_decision text, p_reason text DEFAULT NULL, p_matched jsonb DEFAULT '[]',
                                     p_request_hash text DEFAULT NULL, p_context jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_event_id bigint;
    v_hour     timestamptz := pg_catalog.date_trunc('hour', compute.compute_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
BEGIN
    IF p_tenant_id IS NULL OR p_principal IS NULL OR p_action IS NULL OR p_resource_type IS NULL
       OR p_decision IS NULL OR p_decision NOT IN ('allow', 'deny') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'an audit event needs tenant, principal, action, resource type and decision',
            'Pass decision allow or deny.');
    END IF;
    PERFORM compute.audit_hour_lock(p_tenant_id, v_hour, false);
    IF EXISTS (SELECT 1 FROM compute.audit_checkpoints AS c WHERE c.tenant_id = p_tenant_id AND c.hour = v_hour) THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT',
            pg_catalog.format('the audit hour %s of tenant %s is already signed', v_hour, p_tenant_id),
            'The transaction began before that hour closed: retry it.');
    END IF;
    INSERT INTO compute.audit_events (tenant_id, occurred_at, principal, action, resource_type, resource_id, decision, reason,
                                      matched, request_hash, context)
    VALUES (p_tenant_id, compute.compute_now(), p_principal, p_action, p_resource_type, p_resource_id, p_decision, p_reason,
            coalesce(p_matched, '[]'), p_request_hash, coalesce(p_context, '{}'))
    RETURNING event_id INTO v_event_id;
    RETURN v_event_id;
END
$$;
COMMENT ON FUNCTION compute.audit_record(uuid, text, text, text, text, text, text, jsonb, text, jsonb) IS 'Write one audit event (the admission path calls it).';

CREATE FUNCTION compute.audit_event_text(p_event compute.audit_events)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'event_id', p_event.event_id, 'tenant_id', p_event.tenant_id,
        'occurred_at', pg_catalog.to_char(p_event.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'principal', p_event.principal, 'action', p_event.action, 'resource_type', p_event.resource_type,
        'resource_id', p_event.resource_id, 'decision', p_event.decision, 'reason', p_event.reason,
        'matched', p_event.matched, 'request_hash', p_event.request_hash, 'context', p_event.context)::text
$$;
COMMENT ON FUNCTION compute.audit_event_text(compute.audit_events) IS 'The canonical text of an audit event: what its Merkle leaf hashes.';

CREATE FUNCTION compute.audit_hour_leaves(p_tenant_id uuid, p_hour timestamptz)
RETURNS TABLE (event_id bigint, leaf bytea)
LANGUAGE sql STABLE
AS $$
    SELECT e.event_id, pg_catalog.sha256('\x00'::bytea || pg_catalog.convert_to(compute.audit_event_text(e), 'UTF8'))
      FROM compute.audit_events AS e
     WHERE e.tenant_id = p_tenant_id AND e.occurred_at >= p_hour AND e.occurred_at < p_hour + interval '1 hour'
     ORDER BY e.event_id
$$;
COMMENT ON FUNCTION compute.audit_hour_leaves(uuid, timestamptz) IS 'The Merkle leaves of a tenant''s hour, in event_id order.';

CREATE FUNCTION compute.audit_merkle_levels(p_leaves bytea[])
RETURNS bytea[][]
LANGUAGE plpgsql IMMUTABLE
AS $$
-- Every level of the tree, leaves first, root last; each level padded with NULLs to the leaves' width
-- (a two-dimensional array must be rectangular).
DECLARE
    v_level  bytea[] := p_leaves;
    v_next   bytea[];
    v_levels bytea[][];
    v_width  integer := pg_catalog.cardinality(p_leaves);
BEGIN
    IF v_width = 0 THEN
        RETURN NULL;
    END IF;
    v_levels := ARRAY[v_level];
    WHILE pg_catalog.cardinality(v_level) > 1 LOOP
        v_next := '{}';
        FOR i IN 1 .. pg_catalog.cardinality(v_level) BY 2 LOOP
            v_next := v_next || CASE WHEN i = pg_catalog.cardinality(v_level) THEN v_level[i]
                                     ELSE pg_catalog.sha256('\x01'::bytea || v_level[i] || v_level[i + 1]) END;
        END LOOP;
        v_level := v_next;
        v_levels := v_levels || (v_level || pg_catalog.array_fill(NULL::bytea, ARRAY[v_width - pg_catalog.cardinality(v_level)]));
    END LOOP;
    RETURN v_levels;
END
$$;
COMMENT ON FUNCTION compute.audit_merkle_levels(bytea[]) IS 'The levels of the Merkle tree over the given leaves (root at the last level''s first element).';

CREATE FUNCTION compute.audit_merkle_root(p_tenant_id uuid, p_hour timestamptz)
RETURNS TABLE (leaf_count integer, root bytea)
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.cardinality(l.leaves), t.levels[pg_catalog.array_length(t.levels, 1)][1]
      FROM (SELECT pg_catalog.array_agg(h.leaf ORDER BY h.event_id) AS leaves FROM compute.audit_hour_leaves(p_tenant_id, p_hour) AS h) AS l
     CROSS JOIN LATERAL (SELECT compute.audit_merkle_levels(l.leaves) AS levels) AS t
     WHERE l.leaves IS NOT NULL
$$;
COMMENT ON FUNCTION compute.audit_merkle_root(uuid, timestamptz) IS 'Leaf count and Merkle root of a tenant''s hour of audit events.';

CREATE FUNCTION compute.audit_proof(p_event_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_event  compute.audit_events;
    v_hour   timestamptz;
    v_leaves bytea[];
    v_levels bytea[][];
    v_index  integer;
    v_i      integer;
    v_width  integer;
    v_path   jsonb := '[]';
    v_cp     compute.audit_checkpoints;
BEGIN
    SELECT * INTO v_event FROM compute.audit_events AS e WHERE e.event_id = p_event_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no audit event %s', p_event_id), 'Check the event id.');
    END IF;
    v_hour := pg_catalog.date_trunc('hour', v_event.occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    SELECT pg_catalog.array_agg(h.leaf ORDER BY h.event_id)
      INTO v_leaves FROM compute.audit_hour_leaves(v_event.tenant_id, v_hour) AS h;
    SELECT o.n INTO v_index FROM (SELECT h.event_id, row_number() OVER (ORDER BY h.event_id) AS n
                                    FROM compute.audit_hour_leaves(v_event.tenant_id, v_hour) AS h) AS o
     WHERE o.event_id = p_event_id;
    v_levels := compute.audit_merkle_levels(v_leaves);
    -- Walk up: at each level the sibling of the node (if it has one) joins the path.
    v_i := v_index;
    v_width := pg_catalog.cardinality(v_leaves);
    FOR level IN 1 .. pg_catalog.array_length(v_levels, 1) - 1 LOOP
        IF v_i % 2 = 0 THEN
            v_path := v_path || pg_catalog.jsonb_build_object('side', 'left', 'hash', pg_catalog.encode(v_levels[level][v_i - 1], 'hex'));
        ELSIF v_i < v_width THEN
            v_path := v_path || pg_catalog.jsonb_build_object('side', 'right', 'hash', pg_catalog.encode(v_levels[level][v_i + 1], 'hex'));
        END IF;
        v_i := (v_i + 1) / 2;
        v_width := (v_width + 1) / 2;
    END LOOP;
    SELECT * INTO v_cp FROM compute.audit_checkpoints AS c WHERE c.tenant_id = v_event.tenant_id AND c.hour = v_hour;
    RETURN pg_catalog.jsonb_build_object(
        'event_id', p_event_id, 'tenant_id', v_event.tenant_id, 'hour', v_hour, 'index', v_index - 1,
        'leaf_count', pg_catalog.cardinality(v_leaves), 'event_text', compute.audit_event_text(v_event),
        'leaf', pg_catalog.encode(v_leaves[v_index], 'hex'), 'path', v_path,
        'root', pg_catalog.encode(v_levels[pg_catalog.array_length(v_levels, 1)][1], 'hex'),
        'checkpoint', CASE WHEN v_cp.tenant_id IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object(
            'leaf_count', v_cp.leaf_count, 'root', pg_catalog.encode(v_cp.root, 'hex'), 'key_id', v_cp.key_id,
            'signature', pg_catalog.encode(v_cp.signature, 'hex')) END);
END
$$;
COMMENT ON FUNCTION compute.audit_proof(bigint) IS 'Inclusion proof of an audit event in its tenant''s hour: leaf, sibling path, root, checkpoint.';

CREATE FUNCTION compute.audit_checkpoints_due(p_limit integer)
RETURNS TABLE (tenant_id uuid, hour timestamptz, leaf_count integer, root bytea)
LANGUAGE sql STABLE
AS $$
    -- Hours that compute_now() has closed, with events and no checkpoint yet.
    SELECT h.tenant_id, h.hour, m.leaf_count, m.root
      FROM (SELECT DISTINCT e.tenant_id, pg_catalog.date_trunc('hour', e.occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour
              FROM compute.audit_events AS e
             WHERE e.occurred_at < pg_catalog.date_trunc('hour', compute.compute_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS h
     CROSS JOIN LATERAL compute.audit_merkle_root(h.tenant_id, h.hour) AS m
     WHERE NOT EXISTS (SELECT 1 FROM compute.audit_checkpoints AS c WHERE c.tenant_id = h.tenant_id AND c.hour = h.hour)
     ORDER BY h.hour, h.tenant_id
     LIMIT p_limit
$$;
COMMENT ON FUNCTION compute.audit_checkpoints_due(integer) IS 'Closed tenant-hours with audit events and no checkpoint: what the worker signs next.';

CREATE FUNCTION compute.audit_checkpoint_store(p_tenant_id uuid, p_hour timestamptz, p_leaf_count integer, p_root bytea,
                                               p_key_id text, p_signature bytea)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    -- The signed root must be the root of the events as they are once writers of the hour are done.
    PERFORM compute.audit_hour_lock(p_tenant_id, p_hour, true);
    IF NOT EXISTS (SELECT 1 FROM compute.audit_merkle_root(p_tenant_id, p_hour) AS m
                    WHERE m.leaf_count = p_leaf_count AND m.root = p_root) THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('the audit events of %s at %s changed since they were read', p_tenant_id, p_hour),
            'Read the due checkpoints again and sign the current root.');
    END IF;
    INSERT INTO compute.audit_checkpoints (tenant_id, hour, leaf_count, root, key_id, signature, created_at)
    VALUES (p_tenant_id, p_hour, p_leaf_count, p_root, p_key_id, p_signature, compute.compute_now())
    ON CONFLICT (tenant_id, hour) DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION compute.audit_checkpoint_store(uuid, timestamptz, integer, bytea, text, bytea) IS 'Store a signed checkpoint (once per tenant-hour) after checking its root.';

CREATE FUNCTION compute.audit_export(p_tenant_id uuid, p_from timestamptz, p_to timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    -- Whole hours only (p_from rounded down, p_to up): a checkpoint covers all of its hour's events.
    WITH span AS (
        SELECT pg_catalog.date_trunc('hour', p_from AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS from_hour,
               pg_catalog.date_trunc('hour', (p_to AT TIME ZONE 'UTC') + interval '1 hour' - interval '1 microsecond')
                   AT TIME ZONE 'UTC' AS to_hour)
    SELECT pg_catalog.jsonb_build_object(
        'version', 1, 'tenant_id', p_tenant_id, 'from', s.from_hour, 'to', s.to_hour,
        'keys', coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('key_id', k.key_id, 'public_key', pg_catalog.encode(k.public_key, 'hex')) ORDER BY k.key_id)
                            FROM compute.audit_keys AS k), '[]'),
        'checkpoints', coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                     'hour', pg_catalog.to_char(c.hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:00:00"Z"'),
                                     'leaf_count', c.leaf_count, 'root', pg_catalog.encode(c.root, 'hex'),
                                     'key_id', c.key_id, 'signature', pg_catalog.encode(c.signature, 'hex')) ORDER BY c.hour)
                                   FROM compute.audit_checkpoints AS c
                                  WHERE c.tenant_id = p_tenant_id AND c.hour >= s.from_hour AND c.hour < s.to_hour), '[]'),
        'events', coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                'event_id', e.event_id,
                                'hour', pg_catalog.to_char(pg_catalog.date_trunc('hour', e.occurred_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24:00:00"Z"'),
                                'text', compute.audit_event_text(e)) ORDER BY e.event_id)
                              FROM compute.audit_events AS e
                             WHERE e.tenant_id = p_tenant_id AND e.occurred_at >= s.from_hour AND e.occurred_at < s.to_hour), '[]'))
      FROM span AS s
$$;
COMMENT ON FUNCTION compute.audit_export(uuid, timestamptz, timestamptz) IS
    'A tenant''s audit events, checkpoints and public keys of the whole hours that [p_from, p_to) touches, for offline verification.';

CREATE FUNCTION worker_api.audit_key_register(p_key_id text, p_public_key bytea) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
BEGIN
    INSERT INTO compute.audit_keys (key_id, public_key, created_at) VALUES (p_key_id, p_public_key, compute.compute_now())
    ON CONFLICT (key_id) DO NOTHING;
    IF NOT EXISTS (SELECT 1 FROM compute.audit_keys AS k WHERE k.key_id = p_key_id AND k.public_key = p_public_key) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('audit key %s is registered with another public key', p_key_id),
            'Give a new key a new key id; a key id names one key forever.');
    END IF;
END
$$;
CREATE FUNCTION worker_api.audit_checkpoints_due(p_limit integer)
RETURNS TABLE (tenant_id uuid, hour timestamptz, leaf_count integer, root bytea)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT * FROM compute.audit_checkpoints_due(p_limit) $$;
CREATE FUNCTION worker_api.audit_checkpoint_store(p_tenant_id uuid, p_hour timestamptz, p_leaf_count integer, p_root bytea,
                                                  p_key_id text, p_signature bytea) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.audit_checkpoint_store(p_tenant_id, p_hour, p_leaf_count, p_root, p_key_id, p_signature) $$;

CREATE FUNCTION ops.audit_proof(p_event_id bigint) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.audit_proof(p_event_id) $$;
COMMENT ON FUNCTION ops.audit_proof(bigint) IS 'Inclusion proof of an audit event.';
CREATE FUNCTION ops.audit_export(p_tenant_id uuid, p_from timestamptz, p_to timestamptz) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.audit_export(p_tenant_id, p_from, p_to) $$;
COMMENT ON FUNCTION ops.audit_export(uuid, timestamptz, timestamptz) IS 'A tenant''s audit trail for `better-compute audit verify`.';
