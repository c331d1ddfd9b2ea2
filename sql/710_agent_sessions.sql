-- Site agents' gateway sessions (issue 14 part 3, P5, P14): a site agent dials out to a gateway
-- with its own certificate, like a node, instead of logging in to PostgreSQL.
--
--   certificate   The agent makes a P-256 TLS key (certificates carry P-256 only: pki/keys.py) and
--                 asks a gateway for a certificate with a CSR and an `agent.certificate` envelope
--                 {agent_id, public_key_sha256} signed by its registered Ed25519 signing key
--                 (compute.site_agents.signing_key, the key its results are signed with). The
--                 gateway records the request (agent_api.certificate_request); the signer verifies
--                 the envelope with the registered key (PostgreSQL 15 verifies no Ed25519) and
--                 issues `spiffe://<trust domain>/site/<site>/agent/<agent id>`; the database
--                 decides again (compute.agent_certificate_refusal) and records the certified key
--                 with the signing key that proved it (compute.site_agent_sessions).
--   session       agent_api.session_open(agent, site, gateway, certificate key) opens a session only
--                 while that key is the one certified for the agent under its current signing key:
--                 an agent whose signing key was replaced (ops.site_agent_signing_key_set)
--                 gets none with an older certificate. Each open is a new epoch and a new random
--                 session id, which fences every older one.
--   agent_api     what a gateway (bc_gateway) calls for an agent's session: claims and results
--                 name the session id the gateway got when it opened the session for the
--                 certificate it verified; the agent id comes from that session row, never from a
--                 parameter, so a gateway acts only for sessions it opened. A closed or older
--                 session, or one whose agent's signing key changed since, is FENCED. Claims and
--                 results go through the same functions as site_api's (bmc_ops_claim,
--                 bmc_op_result_append: the result stays signed by the agent, a worker verifies it).
CREATE SCHEMA agent_api AUTHORIZATION bc_owner;
COMMENT ON SCHEMA agent_api IS 'What gateways call for site agents'' sessions (bc_gateway): certificates, sessions, BMC claims and results.';
GRANT USAGE ON SCHEMA agent_api TO bc_gateway;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA agent_api GRANT EXECUTE ON FUNCTIONS TO bc_gateway;

SET LOCAL ROLE bc_owner;

CREATE TABLE compute.site_agent_sessions (
    agent_id      uuid CONSTRAINT site_agent_sessions_pkey PRIMARY KEY
                       CONSTRAINT site_agent_sessions_agent_id_fkey REFERENCES compute.site_agents,
    site_id       uuid NOT NULL,
    certified_key bytea NOT NULL CONSTRAINT site_agent_sessions_certified_key_check CHECK (octet_length(certified_key) BETWEEN 32 AND 1024),
    signing_key   bytea NOT NULL CONSTRAINT site_agent_sessions_signing_key_check CHECK (octet_length(signing_key) = 32),
    certified_at  timestamptz NOT NULL,
    epoch         bigint NOT NULL DEFAULT 0 CONSTRAINT site_agent_sessions_epoch_check CHECK (epoch >= 0),
    gateway       text CONSTRAINT site_agent_sessions_gateway_check CHECK (length(gateway) BETWEEN 1 AND 64),
    opened_at     timestamptz,
    closed_at     timestamptz,
    session_id    uuid CONSTRAINT site_agent_sessions_session_id_key UNIQUE
);
COMMENT ON TABLE compute.site_agent_sessions IS 'Each site agent''s certified TLS key (DER, with the signing key that proved it) and its gateway session (epoch).';
COMMENT ON COLUMN compute.site_agent_sessions.session_id IS 'The current session''s id (random, new at every open): what the gateway names in agent_api calls.';

CREATE FUNCTION compute.agent_certificate_request(p_agent_id uuid, p_gateway text, p_csr text, p_public_key bytea, p_proof jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.site_agents AS a WHERE a.agent_id = p_agent_id AND a.signing_key IS NOT NULL) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', pg_catalog.format('no site agent %s with a signing key', p_agent_id),
            'Register the agent with its signing key (ops.site_agent_register, or ops.site_agent_signing_key_set).');
    END IF;
    IF pg_catalog.jsonb_typeof(p_proof) IS DISTINCT FROM 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'an agent''s certificate request carries its agent.certificate envelope',
            'Upgrade the site agent: it signs its certificate request with its signing key.');
    END IF;
    RETURN compute.svid_request_add('agent', p_gateway, NULL, NULL, NULL, p_csr, p_public_key, p_proof, NULL, p_agent_id);
END
$$;
COMMENT ON FUNCTION compute.agent_certificate_request(uuid, text, text, bytea, jsonb) IS 'Record a registered agent''s certificate request for the signer (ACCESS_DENIED for an agent unknown or without a signing key).';

CREATE FUNCTION compute.agent_certificate_refusal(p_request compute.svid_requests, p_verified_key bytea)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
-- Why an agent's certificate is not authorised now (NULL: it is): the signer verified the
-- agent.certificate envelope with this key, which must be the agent's registered signing key, and
-- the envelope names this agent and the key to certify.
DECLARE
    v_body jsonb := p_request.proof -> 'body';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.site_agents AS a WHERE a.agent_id = p_request.agent_id) THEN
        RETURN 'the site agent is not registered';
    END IF;
    IF p_verified_key IS NULL OR NOT EXISTS (SELECT 1 FROM compute.site_agents AS a
                                              WHERE a.agent_id = p_request.agent_id AND a.signing_key = p_verified_key) THEN
        RETURN 'the request is not signed by the agent''s registered signing key';
    END IF;
    IF v_body ->> 'agent_id' IS DISTINCT FROM p_request.agent_id::text
       OR v_body ->> 'public_key_sha256' IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(p_request.public_key), 'hex') THEN
        RETURN 'the signed request names another agent or key';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.agent_certificate_refusal(compute.svid_requests, bytea) IS 'Why an agent''s certificate is not authorised now, or NULL.';

CREATE FUNCTION compute.agent_certified(p_request compute.svid_requests, p_signing_key bytea)
RETURNS void
LANGUAGE sql
AS $$
    -- The newest certificate's key is the one that opens sessions; the session's epoch stays.
    INSERT INTO compute.site_agent_sessions AS s (agent_id, site_id, certified_key, signing_key, certified_at)
    SELECT a.agent_id, a.site_id, p_request.public_key, p_signing_key, compute.compute_now()
      FROM compute.site_agents AS a WHERE a.agent_id = p_request.agent_id
    ON CONFLICT (agent_id) DO UPDATE
        SET certified_key = EXCLUDED.certified_key, signing_key = EXCLUDED.signing_key, certified_at = EXCLUDED.certified_at;
$$;
COMMENT ON FUNCTION compute.agent_certified(compute.svid_requests, bytea) IS 'Record the key an agent''s certificate was issued for, and the signing key that proved it.';

CREATE FUNCTION compute.agent_session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the agent's session row (the update).
DECLARE
    v_session jsonb;
BEGIN
    UPDATE compute.site_agent_sessions AS s
       SET epoch = s.epoch + 1, session_id = pg_catalog.gen_random_uuid(), gateway = p_gateway,
           opened_at = compute.compute_now(), closed_at = NULL
      FROM compute.site_agents AS a
     WHERE s.agent_id = p_agent_id AND a.agent_id = s.agent_id AND a.site_id = p_site_id
       AND s.certified_key = p_public_key AND s.signing_key = a.signing_key
    RETURNING pg_catalog.jsonb_build_object('session_id', s.session_id, 'epoch', s.epoch) INTO v_session;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('ACCESS_DENIED',
            pg_catalog.format('the certificate''s key is not the key certified for site agent %s of site %s under its registered signing key',
                              p_agent_id, p_site_id),
            'The agent was not registered, its signing key was replaced or removed (ops.site_agent_signing_key_set), or a newer certificate was issued: the agent asks for a new certificate.');
    END IF;
    RETURN v_session;
END
$$;
COMMENT ON FUNCTION compute.agent_session_open(uuid, uuid, text, bytea) IS 'Open a session for the holder of the agent''s certified key: a new epoch and session id, which fence every older one.';

CREATE FUNCTION compute.agent_of_session(p_session_id uuid)
RETURNS uuid
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_agent_id uuid;
BEGIN
    SELECT s.agent_id INTO v_agent_id
      FROM compute.site_agent_sessions AS s JOIN compute.site_agents AS a ON a.agent_id = s.agent_id
     WHERE s.session_id = p_session_id AND s.closed_at IS NULL AND s.signing_key = a.signing_key;
    IF v_agent_id IS NULL THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('site agent session %s is not current', p_session_id),
            'A newer session of the agent exists, it was closed, or the agent''s signing key changed: the agent dials again.');
    END IF;
    RETURN v_agent_id;
END
$$;
COMMENT ON FUNCTION compute.agent_of_session(uuid) IS 'The agent of a current session (open, the newest, under the agent''s registered signing key); FENCED otherwise.';

-- -- agent_api (bc_gateway) -----------------------------------------------------------------------------

CREATE FUNCTION agent_api.certificate_request(p_agent_id uuid, p_gateway text, p_csr text, p_public_key bytea, p_proof jsonb)
RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.agent_certificate_request(p_agent_id, p_gateway, p_csr, p_public_key, p_proof)
$$;
COMMENT ON FUNCTION agent_api.certificate_request(uuid, text, text, bytea, jsonb) IS 'A site agent asks for its certificate (proven by its signing key); answers the request to wait for (node_api.certificate_get).';

CREATE FUNCTION agent_api.session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.agent_session_open(p_agent_id, p_site_id, p_gateway, p_public_key) $$;
COMMENT ON FUNCTION agent_api.session_open(uuid, uuid, text, bytea) IS 'Open the session of the agent whose certificate the gateway verified; answers {session_id, epoch}.';

CREATE FUNCTION agent_api.session_close(p_session_id uuid) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    UPDATE compute.site_agent_sessions SET closed_at = compute.compute_now()
     WHERE session_id = p_session_id AND closed_at IS NULL
    RETURNING true
$$;
COMMENT ON FUNCTION agent_api.session_close(uuid) IS 'The agent''s session ended (nothing else changes: its running ops are taken back after bmc_op_seconds).';

CREATE FUNCTION agent_api.bmc_sessions() RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.limit('bmc_sessions_per_agent')::integer $$;
COMMENT ON FUNCTION agent_api.bmc_sessions() IS 'How many BMC operations one agent runs at once (bmc_sessions_per_agent).';

CREATE FUNCTION agent_api.ops_claim(p_session_id uuid, p_limit integer) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.bmc_ops_claim(compute.agent_of_session(p_session_id), p_limit)
$$;
COMMENT ON FUNCTION agent_api.ops_claim(uuid, integer) IS 'Claim queued BMC operations of the session''s agent (FENCED unless the session is current).';

CREATE FUNCTION agent_api.op_result(p_session_id uuid, p_envelope jsonb) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.bmc_op_result_append(compute.agent_of_session(p_session_id), p_envelope)
$$;
COMMENT ON FUNCTION agent_api.op_result(uuid, jsonb) IS 'Relay the session''s agent''s signed result of a running op, as it is; a worker verifies and applies it.';

CREATE VIEW ops.site_agent_sessions AS
    SELECT s.agent_id, a.name, s.site_id, s.epoch, s.gateway, s.opened_at, s.closed_at, s.certified_at,
           pg_catalog.encode(pg_catalog.sha256(s.certified_key), 'hex') AS certified_key_sha256,
           s.signing_key = a.signing_key AS signing_key_current
      FROM compute.site_agent_sessions AS s JOIN compute.site_agents AS a ON a.agent_id = s.agent_id;
COMMENT ON VIEW ops.site_agent_sessions IS 'Site agents: the key certified last, whether its signing key is still the registered one, and the gateway session.';
