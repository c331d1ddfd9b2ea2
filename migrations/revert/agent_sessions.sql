-- Revert better_compute:agent_sessions from pg
-- Site agents dial out to a gateway: certificates proven by the agent's signing key (svid_requests kind agent), sessions bound to the certified key with a random session id (site_agent_sessions), agent_api for the gateway (the agent taken from the session row)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- by hand: the view, the table, the request kind.
DROP VIEW ops.site_agent_sessions;
DROP TABLE compute.site_agent_sessions;
DELETE FROM compute.svid_requests WHERE kind = 'agent';
ALTER TABLE compute.svid_requests DROP CONSTRAINT svid_requests_agent_has_agent_and_proof;
ALTER TABLE compute.svid_requests DROP CONSTRAINT svid_requests_gateway_has_no_node,
    ADD CONSTRAINT svid_requests_gateway_has_no_node CHECK ((kind = 'gateway') = (node_id IS NULL));
ALTER TABLE compute.svid_requests DROP CONSTRAINT svid_requests_kind_check,
    ADD CONSTRAINT svid_requests_kind_check CHECK (kind IN ('join', 'renew', 'gateway'));
ALTER TABLE compute.svid_requests DROP COLUMN agent_id;


DROP FUNCTION agent_api.bmc_sessions();

DROP FUNCTION agent_api.certificate_request(uuid,text,text,bytea,jsonb);

DROP FUNCTION agent_api.op_result(uuid,jsonb);

DROP FUNCTION agent_api.ops_claim(uuid,integer);

DROP FUNCTION agent_api.session_close(uuid);

DROP FUNCTION agent_api.session_open(uuid,uuid,text,bytea);

DROP FUNCTION compute.agent_certificate_refusal(compute.svid_requests,bytea);

DROP FUNCTION compute.agent_certificate_request(uuid,text,text,bytea,jsonb);

DROP FUNCTION compute.agent_certified(compute.svid_requests,bytea);

DROP FUNCTION compute.agent_of_session(uuid);

DROP FUNCTION compute.agent_session_open(uuid,uuid,text,bytea);

DROP FUNCTION compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[],uuid);

CREATE OR REPLACE FUNCTION compute.svid_decide(p_request_id uuid, p_verified_key bytea, p_certificate text, p_ca_sha256 bytea, p_reason text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
-- Lock order: the request row.
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

CREATE OR REPLACE FUNCTION compute.svid_request_add(p_kind text, p_gateway text, p_node_id uuid, p_token_id uuid, p_epoch bigint, p_csr text, p_public_key bytea, p_proof jsonb, p_names text[])
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
                                       names, requested_at)
    VALUES (v_request_id, p_kind, p_gateway, p_node_id, p_token_id, p_epoch, p_csr, p_public_key, p_proof,
            coalesce(p_names, '{}'), compute.compute_now());
    PERFORM pg_catalog.pg_notify('bc_svid_request', v_request_id::text);
    RETURN v_request_id;
END
$function$;

COMMENT ON FUNCTION compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[]) IS 'Record a certificate request for a signer (NOTIFY bc_svid_request).';

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
                       'registered_key', pg_catalog.encode(i.public_key, 'base64')) AS request
              FROM compute.svid_requests AS r
              LEFT JOIN compute.node_identities AS i ON i.node_id = r.node_id
             WHERE r.state = 'pending'
             ORDER BY r.requested_at
             LIMIT greatest(coalesce(p_limit, 1), 1)) AS d);
END
$function$;

COMMIT;
