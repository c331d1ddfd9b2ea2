-- Certificate issuance off the node path (issue 20, P14: relays cannot forge). A gateway holds no
-- CA key: it records what a node asked for (a CSR, after a bound join token or under its current
-- session) and waits; a signer (`serve signer`, or `serve worker --ca-key`) reads the pending
-- requests, checks what it can check (the node's signature over a renewal), signs, and hands the
-- certificate back; the database records who asked, for which node, with which token or session
-- epoch, and refuses an issuance it did not authorise (svid_issued decides again at that moment).
--   node_api.join_request   the node proves its token bound to its key: token_ref =
--                           sha256(sha256(token)), proof = HMAC-SHA256(sha256(token),
--                           "bc-v1\njoin\n" || public key DER). A gateway sees neither the token nor
--                           its hash, so it cannot spend a token it relays for a key of its own.
--   node_api.renew_request  under the node's current session, with a node.renew envelope signed by
--                           the node's registered key (verified by the signer)
--   node_api.gateway_certificate_request   a gateway's own serverAuth certificate
--   agent_api.certificate_request  a site agent's certificate (sql/710_agent_sessions.sql), with an
--                           agent.certificate envelope signed by its registered signing key
--   compute.node_cas        the trust bundle: the CA that issues (active) and those still trusted
SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('svid_request_seconds',                 30, 'seconds', 'How long a certificate request waits for a signer before it is refused.'),
    ('svid_requests_kept_seconds',        86400, 'seconds', 'How long decided certificate requests are kept (who asked, for which node).'),
    ('svid_requests_pending_per_gateway',  1000, 'count',   'Certificate requests of one gateway waiting for a signer.');

CREATE TABLE compute.node_cas (
    ca_sha256   bytea CONSTRAINT node_cas_pkey PRIMARY KEY CONSTRAINT node_cas_ca_sha256_check CHECK (octet_length(ca_sha256) = 32),
    certificate text NOT NULL CONSTRAINT node_cas_certificate_check CHECK (octet_length(certificate) BETWEEN 1 AND 16384),
    state       text NOT NULL CONSTRAINT node_cas_state_check CHECK (state IN ('active', 'trusted', 'retired')),
    added_at    timestamptz NOT NULL,
    retired_at  timestamptz,
    CONSTRAINT node_cas_retired_has_retired_at CHECK ((state = 'retired') = (retired_at IS NOT NULL))
);
CREATE UNIQUE INDEX node_cas_one_active ON compute.node_cas ((true)) WHERE state = 'active';
COMMENT ON TABLE compute.node_cas IS 'Node CA certificates (SHA-256 of the DER): the active one issues; active and trusted ones are the trust bundle.';

CREATE TABLE compute.svid_requests (
    request_id    uuid CONSTRAINT svid_requests_pkey PRIMARY KEY,
    kind          text NOT NULL CONSTRAINT svid_requests_kind_check CHECK (kind IN ('join', 'renew', 'gateway', 'agent')),
    gateway       text NOT NULL CONSTRAINT svid_requests_gateway_check CHECK (length(gateway) BETWEEN 1 AND 64),
    node_id       uuid CONSTRAINT svid_requests_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    token_id      uuid CONSTRAINT svid_requests_token_id_fkey REFERENCES compute.join_tokens,
    session_epoch bigint,
    csr           text NOT NULL CONSTRAINT svid_requests_csr_check CHECK (octet_length(csr) BETWEEN 1 AND 8192),
    public_key    bytea NOT NULL CONSTRAINT svid_requests_public_key_check CHECK (octet_length(public_key) BETWEEN 32 AND 1024),
    proof         jsonb,
    names         text[] NOT NULL DEFAULT '{}' CONSTRAINT svid_requests_names_check CHECK (cardinality(names) <= 32),
    requested_at  timestamptz NOT NULL,
    state         text NOT NULL DEFAULT 'pending' CONSTRAINT svid_requests_state_check CHECK (state IN ('pending', 'issued', 'refused')),
    certificate   text CONSTRAINT svid_requests_certificate_check CHECK (octet_length(certificate) <= 16384),
    ca_sha256     bytea,
    reason        text CONSTRAINT svid_requests_reason_check CHECK (length(reason) <= 1000),
    decided_at    timestamptz,
    agent_id      uuid,
    CONSTRAINT svid_requests_join_has_token CHECK ((kind = 'join') = (token_id IS NOT NULL)),
    CONSTRAINT svid_requests_renew_has_session_and_proof CHECK ((kind = 'renew') = (session_epoch IS NOT NULL AND proof IS NOT NULL)),
    CONSTRAINT svid_requests_gateway_has_no_node CHECK ((kind IN ('gateway', 'agent')) = (node_id IS NULL)),
    CONSTRAINT svid_requests_agent_has_agent_and_proof CHECK ((kind = 'agent') = (agent_id IS NOT NULL AND proof IS NOT NULL)),
    CONSTRAINT svid_requests_issued_has_certificate CHECK ((state = 'issued') = (certificate IS NOT NULL AND ca_sha256 IS NOT NULL)),
    CONSTRAINT svid_requests_refused_has_reason CHECK ((state = 'refused') = (reason IS NOT NULL)),
    CONSTRAINT svid_requests_pending_is_undecided CHECK ((state = 'pending') = (decided_at IS NULL))
);
CREATE INDEX svid_requests_pending ON compute.svid_requests (gateway, requested_at) WHERE state = 'pending';
CREATE INDEX svid_requests_decided ON compute.svid_requests (decided_at) WHERE state <> 'pending';
CREATE INDEX svid_requests_node ON compute.svid_requests (node_id, requested_at);
COMMENT ON TABLE compute.svid_requests IS 'Certificate requests relayed by gateways and decided by a signer: who asked, for which node, under which token or session epoch, and the answer.';

CREATE TABLE compute.node_intent_keys (
    public_key   bytea CONSTRAINT node_intent_keys_pkey PRIMARY KEY CONSTRAINT node_intent_keys_public_key_check CHECK (octet_length(public_key) = 32),
    announced_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.node_intent_keys IS 'The intent keys (Ed25519, raw) nodes accept, as the workers announce them: the signing one and, during a rollover, the next or the previous one.';

CREATE INDEX join_tokens_ref ON compute.join_tokens (pg_catalog.sha256(token_sha256));

CREATE FUNCTION compute.hmac_sha256(p_key bytea, p_message bytea)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
-- RFC 2104 with SHA-256 (PostgreSQL 15 has sha256() but no HMAC without pgcrypto).
DECLARE
    v_key   bytea := p_key;
    v_inner bytea;
    v_outer bytea;
BEGIN
    IF octet_length(v_key) > 64 THEN
        v_key := pg_catalog.sha256(v_key);
    END IF;
    v_key := v_key || pg_catalog.decode(pg_catalog.repeat('00', 64 - octet_length(v_key)), 'hex');
    v_inner := v_key;
    v_outer := v_key;
    FOR i IN 0..63 LOOP
        v_inner := pg_catalog.set_byte(v_inner, i, pg_catalog.get_byte(v_key, i) # 54);  -- 0x36
        v_outer := pg_catalog.set_byte(v_outer, i, pg_catalog.get_byte(v_key, i) # 92);  -- 0x5c
    END LOOP;
    RETURN pg_catalog.sha256(v_outer || pg_catalog.sha256(v_inner || p_message));
END
$$;
COMMENT ON FUNCTION compute.hmac_sha256(bytea, bytea) IS 'HMAC-SHA256 (RFC 2104).';

CREATE FUNCTION compute.svid_request_add(p_kind text, p_gateway text, p_node_id uuid, p_token_id uuid, p_epoch bigint,
                                         p_csr text, p_public_key bytea, p_proof jsonb, p_names text[],
                                         p_agent_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_request_id uuid := pg_catalog.gen_random_uuid();
BEGIN
    IF p_gateway IS NULL OR length(p_gateway) NOT BETWEEN 1 AND 64 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a certificate request names the gateway that relays it',
            'Pass the gateway''s name (1-64 characters).');
    END IF;
    IF p_csr IS NULL OR octet_length(p_csr) NOT BETWEEN 1 AND 8192
       OR p_public_key IS NULL OR octet_length(p_public_key) NOT BETWEEN 32 AND 1024 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a certificate request carries a CSR (at most 8192 bytes) and its public key (DER)',
            'Send the PEM CSR and the DER SubjectPublicKeyInfo of its key.');
    END IF;
    IF (SELECT count(*) FROM compute.svid_requests AS r WHERE r.gateway = p_gateway AND r.state = 'pending')
       >= compute.limit('svid_requests_pending_per_gateway') THEN
        PERFORM compute.raise_error('UNAVAILABLE', pg_catalog.format('gateway %s has svid_requests_pending_per_gateway requests waiting', p_gateway),
            'No signer is keeping up: start `better-compute serve signer` (or a worker with --ca-key), then retry.');
    END IF;
    INSERT INTO compute.svid_requests (request_id, kind, gateway, node_id, token_id, session_epoch, csr, public_key, proof,
                                       names, requested_at, agent_id)
    VALUES (v_request_id, p_kind, p_gateway, p_node_id, p_token_id, p_epoch, p_csr, p_public_key, p_proof,
            coalesce(p_names, '{}'), compute.compute_now(), p_agent_id);
    PERFORM pg_catalog.pg_notify('bc_svid_request', v_request_id::text);
    RETURN v_request_id;
END
$$;
COMMENT ON FUNCTION compute.svid_request_add(text, text, uuid, uuid, bigint, text, bytea, jsonb, text[], uuid) IS 'Record a certificate request for a signer (NOTIFY bc_svid_request).';

CREATE FUNCTION compute.node_join_bound(p_token_ref bytea, p_proof bytea, p_inventory jsonb, p_public_key bytea,
                                        p_csr text, p_gateway text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the token row (the UPDATE that consumes it), then what node_adopt locks.
DECLARE
    v_now    timestamptz := compute.compute_now();
    v_token  compute.join_tokens;
    v_fresh  boolean;
    v_joined jsonb;
BEGIN
    -- One statement consumes the token: of two concurrent joins, the second finds it used. A proof
    -- that does not bind the token to this key raises, which undoes the UPDATE: the token stays.
    UPDATE compute.join_tokens SET state = 'used', used_at = v_now
     WHERE pg_catalog.sha256(token_sha256) = p_token_ref AND state = 'active' AND expires_at > v_now
    RETURNING * INTO v_token;
    v_fresh := FOUND;
    IF NOT v_fresh THEN
        -- A join retried by the key that spent the token (its certificate request went unanswered:
        -- no signer ran): a new request for the node it made; nothing else changes.
        SELECT t.* INTO v_token
          FROM compute.join_tokens AS t
          JOIN compute.node_identities AS i ON i.token_id = t.token_id AND i.node_id = t.used_by_node
         WHERE pg_catalog.sha256(t.token_sha256) = p_token_ref AND t.state = 'used' AND t.expires_at > v_now
           AND i.public_key = p_public_key;
    END IF;
    IF v_token.token_id IS NULL OR p_public_key IS NULL OR p_proof IS DISTINCT FROM compute.hmac_sha256(v_token.token_sha256,
            pg_catalog.convert_to(E'bc-v1\njoin\n', 'UTF8') || p_public_key) THEN
        PERFORM compute.join_token_refused();
    END IF;
    v_joined := CASE WHEN v_fresh THEN compute.node_adopt(v_token, p_inventory, p_public_key) ELSE
        pg_catalog.jsonb_build_object('node_id', v_token.used_by_node, 'pool_id', v_token.pool_id,
            'site_id', (SELECT n.site_id FROM compute.nodes AS n WHERE n.node_id = v_token.used_by_node)) END;
    RETURN v_joined || pg_catalog.jsonb_build_object('request_id',
        compute.svid_request_add('join', p_gateway, (v_joined ->> 'node_id')::uuid, v_token.token_id, NULL, p_csr,
                                 p_public_key, NULL, NULL));
END
$$;
COMMENT ON FUNCTION compute.node_join_bound(bytea, bytea, jsonb, bytea, text, text) IS 'Join with a token proven bound to the node''s key; records the SVID request.';

CREATE FUNCTION compute.svid_renew_request(p_node_id uuid, p_epoch bigint, p_gateway text, p_csr text,
                                           p_public_key bytea, p_proof jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    PERFORM compute.node_not_quarantined(p_node_id);
    IF pg_catalog.jsonb_typeof(p_proof) IS DISTINCT FROM 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a renewal carries the node''s node.renew envelope',
            'Upgrade bcd: it signs its renewal with its key.');
    END IF;
    RETURN compute.svid_request_add('renew', p_gateway, p_node_id, NULL, p_epoch, p_csr, p_public_key, p_proof, NULL);
END
$$;
COMMENT ON FUNCTION compute.svid_renew_request(uuid, bigint, text, text, bytea, jsonb) IS 'A renewal under the node''s current session (FENCED otherwise; ACCESS_DENIED when quarantined).';

CREATE FUNCTION compute.svid_request_state(p_request_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('state', r.state, 'certificate', r.certificate, 'reason', r.reason)
      FROM compute.svid_requests AS r WHERE r.request_id = p_request_id;
$$;
COMMENT ON FUNCTION compute.svid_request_state(uuid) IS 'A request''s state, its certificate once issued, the reason once refused.';

CREATE FUNCTION compute.trust_bundle()
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(c.certificate ORDER BY c.state = 'active' DESC, c.added_at DESC), '[]')
      FROM compute.node_cas AS c WHERE c.state IN ('active', 'trusted');
$$;
COMMENT ON FUNCTION compute.trust_bundle() IS 'The node CA certificates to trust now (PEM), the issuing one first.';

CREATE FUNCTION compute.svid_requests_due(p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    -- A request no signer answered in time is refused (its gateway stopped waiting); decided ones
    -- are kept for svid_requests_kept_seconds.
    UPDATE compute.svid_requests SET state = 'refused', decided_at = v_now,
           reason = 'no signer answered within svid_request_seconds'
     WHERE state = 'pending' AND requested_at < v_now - pg_catalog.make_interval(secs => compute.limit('svid_request_seconds'));
    DELETE FROM compute.svid_requests
     WHERE state <> 'pending' AND decided_at < v_now - pg_catalog.make_interval(secs => compute.limit('svid_requests_kept_seconds'));
    RETURN (SELECT coalesce(pg_catalog.jsonb_agg(d.request ORDER BY d.requested_at), '[]')
      FROM (SELECT r.requested_at,
                   pg_catalog.jsonb_build_object('request_id', r.request_id, 'kind', r.kind, 'gateway', r.gateway,
                       'node_id', r.node_id, 'session_epoch', r.session_epoch, 'csr', r.csr,
                       'public_key', pg_catalog.encode(r.public_key, 'base64'), 'proof', r.proof,
                       'names', pg_catalog.to_jsonb(r.names),
                       'registered_key', pg_catalog.encode(i.public_key, 'base64'),
                       'agent_id', r.agent_id, 'site_id', a.site_id,
                       'agent_signing_key', pg_catalog.encode(a.signing_key, 'base64')) AS request
              FROM compute.svid_requests AS r
              LEFT JOIN compute.node_identities AS i ON i.node_id = r.node_id
              LEFT JOIN compute.site_agents AS a ON a.agent_id = r.agent_id
             WHERE r.state = 'pending'
             ORDER BY r.requested_at
             LIMIT greatest(coalesce(p_limit, 1), 1)) AS d);
END
$$;
COMMENT ON FUNCTION compute.svid_requests_due(integer) IS 'Pending certificate requests, oldest first, with the key the node registered; refuses the stale, prunes the old.';

CREATE FUNCTION compute.svid_refusal(p_request compute.svid_requests, p_verified_key bytea, p_ca_sha256 bytea)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
-- Why the database does not authorise this issuance now (NULL: it does). Everything the request
-- rests on is checked again at the moment of issue.
DECLARE
    v_body jsonb := p_request.proof -> 'body';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.node_cas AS c WHERE c.ca_sha256 = p_ca_sha256 AND c.state = 'active') THEN
        RETURN 'the certificate is not from the active node CA';
    END IF;
    IF p_request.kind = 'gateway' THEN
        RETURN NULL;
    END IF;
    IF p_request.kind = 'agent' THEN
        RETURN compute.agent_certificate_refusal(p_request, p_verified_key);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.nodes AS n WHERE n.node_id = p_request.node_id) THEN
        RETURN 'the node no longer exists';
    END IF;
    IF EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = p_request.node_id AND f.flag = 'quarantined') THEN
        RETURN 'the node is quarantined';
    END IF;
    IF p_request.kind = 'join' THEN
        IF NOT EXISTS (SELECT 1 FROM compute.join_tokens AS t JOIN compute.node_identities AS i ON i.token_id = t.token_id
                        WHERE t.token_id = p_request.token_id AND t.used_by_node = p_request.node_id
                          AND i.node_id = p_request.node_id AND i.public_key = p_request.public_key) THEN
            RETURN 'the join token was not consumed by this node with this key';
        END IF;
        RETURN NULL;
    END IF;
    -- renew: the signer verified the node.renew envelope with the node's registered key; the body
    -- binds the node, the session epoch and the key to certify.
    IF NOT EXISTS (SELECT 1 FROM compute.node_identities AS i WHERE i.node_id = p_request.node_id AND i.public_key = p_verified_key) THEN
        RETURN 'the renewal is not signed by the node''s registered key';
    END IF;
    IF v_body ->> 'node_id' IS DISTINCT FROM p_request.node_id::text
       OR v_body ->> 'epoch' IS DISTINCT FROM p_request.session_epoch::text
       OR v_body ->> 'public_key_sha256' IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(p_request.public_key), 'hex') THEN
        RETURN 'the signed renewal names another node, session or key';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.node_sessions AS s
                    WHERE s.node_id = p_request.node_id AND s.epoch = p_request.session_epoch AND s.closed_at IS NULL) THEN
        RETURN 'the session the renewal was asked under is no longer current';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.svid_refusal(compute.svid_requests, bytea, bytea) IS 'Why an issuance is not authorised now, or NULL.';

CREATE FUNCTION compute.svid_decide(p_request_id uuid, p_verified_key bytea, p_certificate text, p_ca_sha256 bytea,
                                    p_reason text)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Lock order: the request row, then (an agent's certificate) the agent's session row.
DECLARE
    v_request compute.svid_requests;
    v_reason  text := p_reason;
BEGIN
    SELECT * INTO v_request FROM compute.svid_requests AS r WHERE r.request_id = p_request_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no certificate request %s', p_request_id),
            'It was decided and pruned, or never made.');
    END IF;
    IF v_request.state <> 'pending' THEN
        RETURN v_request.state;  -- decided already (another signer, or it expired)
    END IF;
    IF v_reason IS NULL THEN
        v_reason := compute.svid_refusal(v_request, p_verified_key, p_ca_sha256);
    END IF;
    UPDATE compute.svid_requests
       SET state = CASE WHEN v_reason IS NULL THEN 'issued' ELSE 'refused' END,
           certificate = CASE WHEN v_reason IS NULL THEN p_certificate END,
           ca_sha256 = CASE WHEN v_reason IS NULL THEN p_ca_sha256 END,
           reason = pg_catalog.left(v_reason, 1000), decided_at = compute.compute_now()
     WHERE request_id = p_request_id;
    IF v_reason IS NULL AND v_request.kind = 'agent' THEN
        PERFORM compute.agent_certified(v_request, p_verified_key);
    END IF;
    PERFORM pg_catalog.pg_notify('bc_svid', p_request_id::text);
    RETURN CASE WHEN v_reason IS NULL THEN 'issued' ELSE 'refused' END;
END
$$;
COMMENT ON FUNCTION compute.svid_decide(uuid, bytea, text, bytea, text) IS 'Record a signer''s certificate, when the database authorises it now, or a refusal (NOTIFY bc_svid).';

CREATE FUNCTION compute.node_ca_publish(p_certificate text, p_ca_sha256 bytea)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Lock order: node_cas (whole table: one publisher at a time decides which CA is active).
DECLARE
    v_state text;
BEGIN
    LOCK TABLE compute.node_cas IN SHARE ROW EXCLUSIVE MODE;
    SELECT c.state INTO v_state FROM compute.node_cas AS c WHERE c.ca_sha256 = p_ca_sha256;
    IF FOUND THEN
        RETURN v_state;
    END IF;
    -- The first CA becomes the active one; a later one is trusted (in the bundle) until an
    -- operator activates it (ops.node_ca_activate): nodes must trust it before it issues.
    v_state := CASE WHEN EXISTS (SELECT 1 FROM compute.node_cas AS c WHERE c.state = 'active') THEN 'trusted' ELSE 'active' END;
    INSERT INTO compute.node_cas (ca_sha256, certificate, state, added_at)
    VALUES (p_ca_sha256, p_certificate, v_state, compute.compute_now());
    RETURN v_state;
END
$$;
COMMENT ON FUNCTION compute.node_ca_publish(text, bytea) IS 'A signer publishes its CA certificate: active when none is, else trusted (in the bundle).';

CREATE FUNCTION compute.node_trust_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
-- Lock order: every node's spec row, in node_id order (as node_specs.tick).
BEGIN
    -- The trust bundle and the intent keys travel in every node's signed spec: a change of either
    -- is a new generation for every node, signed anew and pushed to those connected.
    PERFORM 1 FROM (SELECT s.node_id FROM compute.node_specs AS s ORDER BY s.node_id FOR UPDATE) AS locked;
    UPDATE compute.node_specs SET generation = generation + 1, changed_at = compute.compute_now();
    PERFORM compute.work_poke('node.spec.sign', s.node_id::text) FROM compute.node_specs AS s;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.node_trust_changed() IS 'A node CA or an intent key was added, activated or retired: every node gets a new spec generation (it carries both).';
CREATE TRIGGER node_cas_changed AFTER INSERT OR UPDATE ON compute.node_cas
    FOR EACH STATEMENT EXECUTE FUNCTION compute.node_trust_changed();
CREATE TRIGGER node_intent_keys_changed AFTER INSERT OR DELETE ON compute.node_intent_keys
    FOR EACH STATEMENT EXECUTE FUNCTION compute.node_trust_changed();

CREATE FUNCTION compute.node_intent_keys_announce(p_keys bytea[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
-- Lock order: node_intent_keys (whole table), then what node_trust_changed locks.
BEGIN
    IF cardinality(p_keys) IS NULL OR cardinality(p_keys) NOT BETWEEN 1 AND 4
       OR EXISTS (SELECT 1 FROM unnest(p_keys) AS k(key) WHERE octet_length(k.key) IS DISTINCT FROM 32) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'announce 1 to 4 intent keys, 32 bytes each (raw Ed25519)',
            'Pass the signing key first, then the next or the previous one.');
    END IF;
    LOCK TABLE compute.node_intent_keys IN SHARE ROW EXCLUSIVE MODE;
    IF (SELECT coalesce(pg_catalog.array_agg(k.public_key ORDER BY k.public_key), '{}') FROM compute.node_intent_keys AS k)
       = (SELECT pg_catalog.array_agg(DISTINCT k.key ORDER BY k.key) FROM unnest(p_keys) AS k(key)) THEN
        RETURN false;  -- unchanged: no new spec generation for anyone
    END IF;
    DELETE FROM compute.node_intent_keys WHERE public_key <> ALL (p_keys);
    INSERT INTO compute.node_intent_keys (public_key, announced_at)
    SELECT DISTINCT k.key, compute.compute_now() FROM unnest(p_keys) AS k(key)
    ON CONFLICT (public_key) DO NOTHING;
    RETURN true;
END
$$;
COMMENT ON FUNCTION compute.node_intent_keys_announce(bytea[]) IS 'A worker announces the intent keys nodes accept; a change is a new spec generation for every node.';

-- -- node_api (bc_gateway) ----------------------------------------------------------------------------

CREATE FUNCTION node_api.join_request(p_token_ref bytea, p_proof bytea, p_inventory jsonb, p_public_key bytea, p_csr text,
                                      p_gateway text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.node_join_bound(p_token_ref, p_proof, p_inventory, p_public_key, p_csr, p_gateway)
$$;
COMMENT ON FUNCTION node_api.join_request(bytea, bytea, jsonb, bytea, text, text) IS 'A node joins with its token bound to its key; answers its node id and the SVID request to wait for.';

CREATE FUNCTION node_api.renew_request(p_node_id uuid, p_epoch bigint, p_gateway text, p_csr text, p_public_key bytea,
                                       p_proof jsonb) RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.svid_renew_request(p_node_id, p_epoch, p_gateway, p_csr, p_public_key, p_proof)
$$;
COMMENT ON FUNCTION node_api.renew_request(uuid, bigint, text, text, bytea, jsonb) IS 'A node renews its SVID under its current session; answers the request to wait for.';

CREATE FUNCTION node_api.gateway_certificate_request(p_gateway text, p_csr text, p_public_key bytea, p_names text[])
RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.svid_request_add('gateway', p_gateway, NULL, NULL, NULL, p_csr, p_public_key, NULL, p_names)
$$;
COMMENT ON FUNCTION node_api.gateway_certificate_request(text, text, bytea, text[]) IS 'A gateway asks for its own server certificate; answers the request to wait for.';

CREATE FUNCTION node_api.certificate_get(p_request_id uuid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.svid_request_state(p_request_id) $$;
COMMENT ON FUNCTION node_api.certificate_get(uuid) IS 'A certificate request''s state: pending, issued (with the certificate) or refused (with the reason).';

CREATE FUNCTION node_api.trust_bundle() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.trust_bundle() $$;
COMMENT ON FUNCTION node_api.trust_bundle() IS 'The node CA certificates to trust (PEM), the issuing one first.';

-- -- worker_api (bc_worker: the signer) ----------------------------------------------------------------

CREATE FUNCTION worker_api.svid_requests_due(p_limit integer) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.svid_requests_due(p_limit) $$;
COMMENT ON FUNCTION worker_api.svid_requests_due(integer) IS 'Pending certificate requests for a signer.';

CREATE FUNCTION worker_api.svid_issued(p_request_id uuid, p_verified_key bytea, p_certificate text, p_ca_sha256 bytea)
RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.svid_decide(p_request_id, p_verified_key, p_certificate, p_ca_sha256, NULL)
$$;
COMMENT ON FUNCTION worker_api.svid_issued(uuid, bytea, text, bytea) IS 'Hand back a certificate: issued when the database authorises it now, else refused (answers which).';

CREATE FUNCTION worker_api.svid_refused(p_request_id uuid, p_reason text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.svid_decide(p_request_id, NULL, NULL, NULL, coalesce(p_reason, 'refused by the signer'))
$$;
COMMENT ON FUNCTION worker_api.svid_refused(uuid, text) IS 'The signer refuses a request (a signature that does not verify, a bad CSR).';

CREATE FUNCTION worker_api.node_ca_publish(p_certificate text, p_ca_sha256 bytea) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_ca_publish(p_certificate, p_ca_sha256) $$;
COMMENT ON FUNCTION worker_api.node_ca_publish(text, bytea) IS 'A signer publishes its CA certificate; answers its state (active, trusted, retired).';

CREATE FUNCTION worker_api.node_cas() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce(pg_catalog.jsonb_object_agg(pg_catalog.encode(c.ca_sha256, 'hex'), c.state), '{}') FROM compute.node_cas AS c
$$;
COMMENT ON FUNCTION worker_api.node_cas() IS 'Every node CA and its state, by SHA-256 (hex): which one a signer issues with.';

CREATE FUNCTION worker_api.node_trust_bundle() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.trust_bundle() $$;
COMMENT ON FUNCTION worker_api.node_trust_bundle() IS 'The node CA certificates to trust (PEM), which the worker signs into every node spec.';

CREATE FUNCTION worker_api.node_intent_keys_announce(p_keys bytea[]) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_intent_keys_announce(p_keys) $$;
COMMENT ON FUNCTION worker_api.node_intent_keys_announce(bytea[]) IS 'Announce the intent keys nodes accept (the signing one first); answers whether that changed them.';

CREATE FUNCTION worker_api.node_intent_keys() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.encode(k.public_key, 'base64') ORDER BY k.announced_at, k.public_key), '[]')
      FROM compute.node_intent_keys AS k
$$;
COMMENT ON FUNCTION worker_api.node_intent_keys() IS 'The intent keys nodes accept (base64, raw Ed25519), which the worker signs into every node spec.';

-- -- ops (operators: CA rotation) ----------------------------------------------------------------------

CREATE FUNCTION ops.node_ca_activate(p_ca_sha256 text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
-- Lock order: node_cas (whole table).
BEGIN
    LOCK TABLE compute.node_cas IN SHARE ROW EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM compute.node_cas AS c WHERE c.ca_sha256 = pg_catalog.decode(p_ca_sha256, 'hex') AND c.state <> 'retired') THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no trusted node CA %s', p_ca_sha256),
            'ops.node_cas lists them; a signer publishes its CA when it starts.');
    END IF;
    UPDATE compute.node_cas SET state = 'trusted' WHERE state = 'active';
    UPDATE compute.node_cas SET state = 'active' WHERE ca_sha256 = pg_catalog.decode(p_ca_sha256, 'hex');
    RETURN true;
END
$$;
COMMENT ON FUNCTION ops.node_ca_activate(text) IS 'CA rotation: new certificates come from this CA; the one before stays trusted.';

CREATE FUNCTION ops.node_ca_retire(p_ca_sha256 text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    UPDATE compute.node_cas SET state = 'retired', retired_at = compute.compute_now()
     WHERE ca_sha256 = pg_catalog.decode(p_ca_sha256, 'hex') AND state = 'trusted';
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a trusted, inactive node CA', p_ca_sha256),
            'Activate another CA first (ops.node_ca_activate) and wait until certificates of this one expired.');
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION ops.node_ca_retire(text) IS 'CA rotation: this CA leaves the trust bundle (its certificates are refused from now on).';

CREATE VIEW ops.node_cas AS
    SELECT pg_catalog.encode(c.ca_sha256, 'hex') AS ca_sha256, c.state, c.added_at, c.retired_at, c.certificate
      FROM compute.node_cas AS c;
COMMENT ON VIEW ops.node_cas IS 'Node CAs: active (issues), trusted (in the bundle), retired.';

CREATE VIEW ops.svid_requests AS
    SELECT r.request_id, r.kind, r.gateway, r.node_id, r.token_id, r.session_epoch, r.names, r.requested_at, r.state,
           pg_catalog.encode(r.ca_sha256, 'hex') AS ca_sha256, r.reason, r.decided_at
      FROM compute.svid_requests AS r;
COMMENT ON VIEW ops.svid_requests IS 'Certificate requests: who asked (gateway), for which node, under which token or session epoch, the answer.';
