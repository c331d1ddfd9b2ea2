-- Nodes joining and their sessions (docs/architecture.md §8, §11; P3, P5, P6, P9). Gateways call node_api as
-- role bc_gateway; they never call IAM (P7).
--   join            a join token (single use, under concurrency: one UPDATE consumes it) and the
--                   node's inventory adopt the node into the token's pool; the node's public key is
--                   kept so that its signatures (and certificate renewals) can be checked
--   session_open    a new session_epoch for the node, only for the key its certificate carries when
--                   that is the node's registered key: every later node write carries it, and a
--                   write with an older epoch is FENCED (a second session fences the first)
--   heartbeats      every session of one gateway in one statement per interval
--   session_close   the session ends; nothing else changes (P6: disconnected is not dead)
-- What a node reports under its session (inventory, observed specs, command results, a new key)
-- is appended as signed by node_api.report and applied only after a worker verified it (sql/640).
-- Connected is derived: a session that is open and was heard from within session_timeout_seconds.
-- (compute.node_sessions is in sql/110_fleet.sql: ops.nodes shows it.)
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.node_identities (
    node_id    uuid CONSTRAINT node_identities_pkey PRIMARY KEY CONSTRAINT node_identities_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    public_key bytea NOT NULL CONSTRAINT node_identities_public_key_check CHECK (octet_length(public_key) BETWEEN 32 AND 1024),
    token_id   uuid NOT NULL CONSTRAINT node_identities_token_id_fkey REFERENCES compute.join_tokens,
    joined_at  timestamptz NOT NULL,
    report_epoch bigint NOT NULL DEFAULT 0,
    report_seq   bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE compute.node_identities IS 'How a node joined: its public key (DER SubjectPublicKeyInfo), the token it used, and the (epoch, seq) of the last report of it applied (sql/640).';

CREATE FUNCTION compute.node_adopt(p_token compute.join_tokens, p_inventory jsonb, p_public_key bytea)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the caller consumed the token row; then what node_register locks.
DECLARE
    v_node_id uuid;
BEGIN
    IF p_public_key IS NULL OR octet_length(p_public_key) NOT BETWEEN 32 AND 1024 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a joining node must present its public key', 'Send the DER of its key.');
    END IF;
    PERFORM compute.inventory_validate(p_inventory);
    v_node_id := compute.node_register(p_token.pool_id, p_inventory ->> 'hostname', p_inventory);
    UPDATE compute.join_tokens SET used_by_node = v_node_id WHERE token_id = p_token.token_id;
    INSERT INTO compute.node_identities (node_id, public_key, token_id, joined_at)
    VALUES (v_node_id, p_public_key, p_token.token_id, p_token.used_at)
    ON CONFLICT (node_id) DO UPDATE SET public_key = EXCLUDED.public_key, token_id = EXCLUDED.token_id, joined_at = EXCLUDED.joined_at;
    RETURN pg_catalog.jsonb_build_object('node_id', v_node_id, 'pool_id', p_token.pool_id,
        'site_id', (SELECT n.site_id FROM compute.nodes AS n WHERE n.node_id = v_node_id));
END
$$;
COMMENT ON FUNCTION compute.node_adopt(compute.join_tokens, jsonb, bytea) IS 'Adopt a node into the pool of the join token just consumed; keep its public key.';

CREATE FUNCTION compute.join_token_refused()
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- One answer for unknown, used, revoked, expired and unbound: no oracle for guessers.
    PERFORM compute.raise_error('ACCESS_DENIED', 'the join token is not valid',
        'Mint a new one (joinTokens.create): a token works once, until it expires or is revoked.');
END
$$;
COMMENT ON FUNCTION compute.join_token_refused() IS 'ACCESS_DENIED for any join token that does not admit the join.';

CREATE FUNCTION compute.node_join(p_token text, p_inventory jsonb, p_public_key bytea)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the token row (the UPDATE that consumes it), then what node_adopt locks.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_token   compute.join_tokens;
BEGIN
    -- One statement consumes the token: of two concurrent joins, the second finds it used.
    UPDATE compute.join_tokens SET state = 'used', used_at = v_now
     WHERE token_sha256 = pg_catalog.sha256(pg_catalog.convert_to(coalesce(p_token, ''), 'UTF8'))
       AND state = 'active' AND expires_at > v_now
    RETURNING * INTO v_token;
    IF NOT FOUND THEN
        PERFORM compute.join_token_refused();
    END IF;
    RETURN compute.node_adopt(v_token, p_inventory, p_public_key);
END
$$;
COMMENT ON FUNCTION compute.node_join(text, jsonb, bytea) IS 'Adopt a node into its join token''s pool (the token is consumed once); keep its public key.';

CREATE FUNCTION compute.session_require(p_node_id uuid, p_epoch bigint)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.node_sessions AS s
                    WHERE s.node_id = p_node_id AND s.epoch = p_epoch AND s.closed_at IS NULL) THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('session epoch %s of node %s is not current', p_epoch, p_node_id),
            'A newer session of this node exists (or this one ended): close this connection.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.session_require(uuid, bigint) IS 'FENCED unless the epoch is the node''s current open session.';

CREATE FUNCTION compute.node_not_quarantined(p_node_id uuid)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_node_id AND f.flag = 'quarantined') THEN
        PERFORM compute.raise_error('ACCESS_DENIED', pg_catalog.format('node %s is quarantined', p_node_id),
            'A quarantined node holds no session and gets no certificate: clear the flag (ops.node_clear(node, ''quarantined'')) or join the machine again with a new token.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.node_not_quarantined(uuid) IS 'ACCESS_DENIED when the node is quarantined (no session, no certificate).';

CREATE FUNCTION compute.session_open(p_node_id uuid, p_gateway text, p_public_key bytea)
RETURNS bigint
LANGUAGE plpgsql
AS $$
-- Lock order: the node's session row (the upsert).
DECLARE
    v_now   timestamptz := compute.compute_now();
    v_epoch bigint;
BEGIN
    PERFORM compute.node_get(p_node_id);
    PERFORM compute.node_not_quarantined(p_node_id);
    -- A certificate outlives its key's registration (a released machine's key is deleted, a key
    -- report replaces it): it opens a session only while its key is the node's registered key.
    IF p_public_key IS NULL OR NOT EXISTS (SELECT 1 FROM compute.node_identities AS i
                                            WHERE i.node_id = p_node_id AND i.public_key = p_public_key) THEN
        PERFORM compute.raise_error('ACCESS_DENIED',
            pg_catalog.format('the certificate''s key is not the registered key of node %s', p_node_id),
            'The node''s key was revoked (its machine was released) or replaced since this certificate was issued: the node joins again with a new token.');
    END IF;
    INSERT INTO compute.node_sessions AS s (node_id, epoch, gateway, opened_at, last_heard_at)
    VALUES (p_node_id, 1, p_gateway, v_now, v_now)
    ON CONFLICT (node_id) DO UPDATE
        SET epoch = s.epoch + 1, gateway = EXCLUDED.gateway, opened_at = EXCLUDED.opened_at,
            last_heard_at = EXCLUDED.last_heard_at, closed_at = NULL
    RETURNING s.epoch INTO v_epoch;
    RETURN v_epoch;
END
$$;
COMMENT ON FUNCTION compute.session_open(uuid, text, bytea) IS 'Open a session for the holder of the node''s registered key: a new epoch, which fences every older one.';

CREATE FUNCTION compute.sessions_heard(p_gateway text, p_node_ids uuid[], p_epochs bigint[])
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_fenced uuid[];
BEGIN
    IF cardinality(p_node_ids) IS DISTINCT FROM cardinality(p_epochs) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'one epoch per node', 'Send node ids and epochs in pairs.');
    END IF;
    -- One statement for every session of the gateway (P12: heartbeats are batched); sessions in
    -- node_id order so that two gateways' batches lock rows in the same order.
    UPDATE compute.node_sessions AS s SET last_heard_at = compute.compute_now()
      FROM (SELECT b.node_id, b.epoch FROM unnest(p_node_ids, p_epochs) AS b(node_id, epoch) ORDER BY b.node_id) AS b
     WHERE s.node_id = b.node_id AND s.epoch = b.epoch AND s.closed_at IS NULL;
    -- A quarantined node keeps no session: it is closed here, within one heartbeat interval, and
    -- answered as fenced (the gateway closes the connection; session_open refuses the node).
    UPDATE compute.node_sessions AS s SET closed_at = compute.compute_now()
     WHERE s.node_id = ANY (p_node_ids) AND s.closed_at IS NULL
       AND EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id AND f.flag = 'quarantined');
    SELECT coalesce(pg_catalog.array_agg(b.node_id), '{}') INTO v_fenced
      FROM unnest(p_node_ids, p_epochs) AS b(node_id, epoch)
     WHERE NOT EXISTS (SELECT 1 FROM compute.node_sessions AS s
                        WHERE s.node_id = b.node_id AND s.epoch = b.epoch AND s.closed_at IS NULL);
    RETURN v_fenced;
END
$$;
COMMENT ON FUNCTION compute.sessions_heard(text, uuid[], bigint[]) IS 'Heartbeats of a gateway''s sessions, in one statement; answers the fenced ones (to close).';

CREATE FUNCTION compute.session_close(p_node_id uuid, p_epoch bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    -- Only the session's own epoch closes it; nothing else about the node changes (P6).
    UPDATE compute.node_sessions SET closed_at = compute.compute_now()
     WHERE node_id = p_node_id AND epoch = p_epoch AND closed_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION compute.session_close(uuid, bigint) IS 'End a session (its epoch only); changes nothing else (P6).';

CREATE FUNCTION compute.node_connection(p_node_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    -- Connected and the age since last heard as ops.nodes derives them (one rule), with the session.
    SELECT pg_catalog.jsonb_build_object('connected', coalesce(n.connected, false), 'last_heard_seconds', n.last_heard_seconds,
                                         'session_epoch', s.epoch, 'gateway', s.gateway)
      FROM (SELECT 1) AS one
      LEFT JOIN ops.nodes AS n ON n.node_id = p_node_id
      LEFT JOIN compute.node_sessions AS s ON s.node_id = p_node_id;
$$;
COMMENT ON FUNCTION compute.node_connection(uuid) IS 'Connected (open session heard within session_timeout_seconds) and the age since last heard.';

-- -- node_api (bc_gateway) --------------------------------------------------------------------------

CREATE FUNCTION node_api.join(p_token text, p_inventory jsonb, p_public_key bytea) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.raise_error('UNSUPPORTED',
        'node_api.join took the join token itself: a token crosses a gateway only bound to the node''s key',
        'Upgrade the gateway and bcd to this release: they join with node_api.join_request (token_ref and proof).');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION node_api.join(text, jsonb, bytea) IS 'Removed: UNSUPPORTED (a token crosses the gateway only bound to the node''s key: node_api.join_request).';

CREATE FUNCTION node_api.session_open(p_node_id uuid, p_gateway text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.raise_error('UNSUPPORTED',
        'node_api.session_open without the certificate''s key: a session opens only for the node''s registered key',
        'Upgrade the gateway to this release: it calls node_api.session_open(node_id, gateway, public_key) with the DER SubjectPublicKeyInfo of the client certificate.');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION node_api.session_open(uuid, text) IS 'Removed: UNSUPPORTED (a session opens only for the node''s registered key: node_api.session_open(uuid, text, bytea)).';

CREATE FUNCTION node_api.session_open(p_node_id uuid, p_gateway text, p_public_key bytea) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.session_open(p_node_id, p_gateway, p_public_key) $$;
COMMENT ON FUNCTION node_api.session_open(uuid, text, bytea) IS 'A new session epoch for the node whose client certificate carries its registered key (fences older sessions).';

CREATE FUNCTION node_api.heartbeats(p_gateway text, p_node_ids uuid[], p_epochs bigint[]) RETURNS uuid[]
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.sessions_heard(p_gateway, p_node_ids, p_epochs) $$;
COMMENT ON FUNCTION node_api.heartbeats(text, uuid[], bigint[]) IS 'One statement per interval per gateway; answers the fenced sessions.';

CREATE FUNCTION node_api.session_close(p_node_id uuid, p_epoch bigint) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.session_close(p_node_id, p_epoch) $$;
COMMENT ON FUNCTION node_api.session_close(uuid, bigint) IS 'The session ended (nothing else changes).';
