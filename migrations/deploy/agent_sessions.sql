-- Deploy better_compute:agent_sessions to pg
-- Site agents dial out to a gateway: certificates proven by the agent's signing key (svid_requests kind agent), sessions bound to the certified key with a random session id (site_agent_sessions), agent_api for the gateway (the agent taken from the session row)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- by hand: the table, the request kind, the view.
ALTER TABLE compute.svid_requests ADD COLUMN agent_id uuid;
ALTER TABLE compute.svid_requests DROP CONSTRAINT svid_requests_kind_check,
    ADD CONSTRAINT svid_requests_kind_check CHECK (kind IN ('join', 'renew', 'gateway', 'agent'));
ALTER TABLE compute.svid_requests DROP CONSTRAINT svid_requests_gateway_has_no_node,
    ADD CONSTRAINT svid_requests_gateway_has_no_node CHECK ((kind IN ('gateway', 'agent')) = (node_id IS NULL));
ALTER TABLE compute.svid_requests
    ADD CONSTRAINT svid_requests_agent_has_agent_and_proof CHECK ((kind = 'agent') = (agent_id IS NOT NULL AND proof IS NOT NULL));

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

CREATE VIEW ops.site_agent_sessions AS
    SELECT s.agent_id, a.name, s.site_id, s.epoch, s.gateway, s.opened_at, s.closed_at, s.certified_at,
           pg_catalog.encode(pg_catalog.sha256(s.certified_key), 'hex') AS certified_key_sha256,
           s.signing_key = a.signing_key AS signing_key_current
      FROM compute.site_agent_sessions AS s JOIN compute.site_agents AS a ON a.agent_id = s.agent_id;
COMMENT ON VIEW ops.site_agent_sessions IS 'Site agents: the key certified last, whether its signing key is still the registered one, and the gateway session.';


DROP FUNCTION compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[]);

CREATE OR REPLACE FUNCTION agent_api.bmc_sessions()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.limit('bmc_sessions_per_agent')::integer $function$;

COMMENT ON FUNCTION agent_api.bmc_sessions() IS 'How many BMC operations one agent runs at once (bmc_sessions_per_agent).';

GRANT EXECUTE ON FUNCTION agent_api.bmc_sessions() TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.certificate_request(p_agent_id uuid, p_gateway text, p_csr text, p_public_key bytea, p_proof jsonb)
 RETURNS uuid
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.agent_certificate_request(p_agent_id, p_gateway, p_csr, p_public_key, p_proof)
$function$;

COMMENT ON FUNCTION agent_api.certificate_request(uuid,text,text,bytea,jsonb) IS 'A site agent asks for its certificate (proven by its signing key); answers the request to wait for (node_api.certificate_get).';

GRANT EXECUTE ON FUNCTION agent_api.certificate_request(uuid,text,text,bytea,jsonb) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.op_result(p_session_id uuid, p_envelope jsonb)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.bmc_op_result_append(compute.agent_of_session(p_session_id), p_envelope)
$function$;

COMMENT ON FUNCTION agent_api.op_result(uuid,jsonb) IS 'Relay the session''s agent''s signed result of a running op, as it is; a worker verifies and applies it.';

GRANT EXECUTE ON FUNCTION agent_api.op_result(uuid,jsonb) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.ops_claim(p_session_id uuid, p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.bmc_ops_claim(compute.agent_of_session(p_session_id), p_limit)
$function$;

COMMENT ON FUNCTION agent_api.ops_claim(uuid,integer) IS 'Claim queued BMC operations of the session''s agent (FENCED unless the session is current).';

GRANT EXECUTE ON FUNCTION agent_api.ops_claim(uuid,integer) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.session_close(p_session_id uuid)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    UPDATE compute.site_agent_sessions SET closed_at = compute.compute_now()
     WHERE session_id = p_session_id AND closed_at IS NULL
    RETURNING true
$function$;

COMMENT ON FUNCTION agent_api.session_close(uuid) IS 'The agent''s session ended (nothing else changes: its running ops are taken back after bmc_op_seconds).';

GRANT EXECUTE ON FUNCTION agent_api.session_close(uuid) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.agent_session_open(p_agent_id, p_site_id, p_gateway, p_public_key) $function$;

COMMENT ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) IS 'Open the session of the agent whose certificate the gateway verified; answers {session_id, epoch}.';

GRANT EXECUTE ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) TO bc_gateway;

CREATE OR REPLACE FUNCTION compute.agent_certificate_refusal(p_request compute.svid_requests, p_verified_key bytea)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.agent_certificate_refusal(compute.svid_requests,bytea) IS 'Why an agent''s certificate is not authorised now, or NULL.';

CREATE OR REPLACE FUNCTION compute.agent_certificate_request(p_agent_id uuid, p_gateway text, p_csr text, p_public_key bytea, p_proof jsonb)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.agent_certificate_request(uuid,text,text,bytea,jsonb) IS 'Record a registered agent''s certificate request for the signer (ACCESS_DENIED for an agent unknown or without a signing key).';

CREATE OR REPLACE FUNCTION compute.agent_certified(p_request compute.svid_requests, p_signing_key bytea)
 RETURNS void
 LANGUAGE sql
AS $function$
    -- The newest certificate's key is the one that opens sessions; the session's epoch stays.
    INSERT INTO compute.site_agent_sessions AS s (agent_id, site_id, certified_key, signing_key, certified_at)
    SELECT a.agent_id, a.site_id, p_request.public_key, p_signing_key, compute.compute_now()
      FROM compute.site_agents AS a WHERE a.agent_id = p_request.agent_id
    ON CONFLICT (agent_id) DO UPDATE
        SET certified_key = EXCLUDED.certified_key, signing_key = EXCLUDED.signing_key, certified_at = EXCLUDED.certified_at;
$function$;

COMMENT ON FUNCTION compute.agent_certified(compute.svid_requests,bytea) IS 'Record the key an agent''s certificate was issued for, and the signing key that proved it.';

CREATE OR REPLACE FUNCTION compute.agent_of_session(p_session_id uuid)
 RETURNS uuid
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.agent_of_session(uuid) IS 'The agent of a current session (open, the newest, under the agent''s registered signing key); FENCED otherwise.';

CREATE OR REPLACE FUNCTION compute.agent_session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.agent_session_open(uuid,uuid,text,bytea) IS 'Open a session for the holder of the agent''s certified key: a new epoch and session id, which fence every older one.';

CREATE OR REPLACE FUNCTION compute.svid_decide(p_request_id uuid, p_verified_key bytea, p_certificate text, p_ca_sha256 bytea, p_reason text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.svid_refusal(p_request compute.svid_requests, p_verified_key bytea, p_ca_sha256 bytea)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.svid_request_add(p_kind text, p_gateway text, p_node_id uuid, p_token_id uuid, p_epoch bigint, p_csr text, p_public_key bytea, p_proof jsonb, p_names text[], p_agent_id uuid DEFAULT NULL::uuid)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[],uuid) IS 'Record a certificate request for a signer (NOTIFY bc_svid_request).';

CREATE OR REPLACE FUNCTION compute.svid_requests_due(p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMIT;
