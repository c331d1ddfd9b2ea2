-- Revert better_compute:svid_issuance from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP VIEW ops.svid_requests;

DROP VIEW ops.node_cas;

DELETE FROM compute.limits WHERE name IN ('svid_request_seconds', 'svid_requests_kept_seconds', 'svid_requests_pending_per_gateway');

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.hmac_sha256(bytea,bytea);

DROP FUNCTION compute.join_token_refused();

DROP FUNCTION compute.node_adopt(compute.join_tokens,jsonb,bytea);

DROP FUNCTION compute.node_ca_publish(text,bytea);

DROP FUNCTION compute.node_intent_keys_announce(bytea[]);

DROP FUNCTION compute.node_join_bound(bytea,bytea,jsonb,bytea,text,text);

DROP FUNCTION compute.node_not_quarantined(uuid);

DROP FUNCTION compute.svid_decide(uuid,bytea,text,bytea,text);

DROP FUNCTION compute.svid_refusal(compute.svid_requests,bytea,bytea);

DROP FUNCTION compute.svid_renew_request(uuid,bigint,text,text,bytea,jsonb);

DROP FUNCTION compute.svid_request_add(text,text,uuid,uuid,bigint,text,bytea,jsonb,text[]);

DROP FUNCTION compute.svid_request_state(uuid);

DROP FUNCTION compute.svid_requests_due(integer);

DROP FUNCTION compute.trust_bundle();

DROP FUNCTION node_api.certificate_get(uuid);

DROP FUNCTION node_api.gateway_certificate_request(text,text,bytea,text[]);

DROP FUNCTION node_api.join_request(bytea,bytea,jsonb,bytea,text,text);

DROP FUNCTION node_api.renew_request(uuid,bigint,text,text,bytea,jsonb);

DROP FUNCTION node_api.trust_bundle();

DROP FUNCTION ops.node_ca_activate(text);

DROP FUNCTION ops.node_ca_retire(text);

DROP FUNCTION worker_api.node_ca_publish(text,bytea);

DROP FUNCTION worker_api.node_cas();

DROP FUNCTION worker_api.node_intent_keys();

DROP FUNCTION worker_api.node_intent_keys_announce(bytea[]);

DROP FUNCTION worker_api.node_trust_bundle();

DROP FUNCTION worker_api.svid_issued(uuid,bytea,text,bytea);

DROP FUNCTION worker_api.svid_refused(uuid,text);

DROP FUNCTION worker_api.svid_requests_due(integer);

CREATE OR REPLACE FUNCTION compute.node_join(p_token text, p_inventory jsonb, p_public_key bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
-- Lock order: the token row (the UPDATE that consumes it), then what node_register locks.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_token   compute.join_tokens;
    v_node_id uuid;
BEGIN
    IF p_public_key IS NULL OR octet_length(p_public_key) NOT BETWEEN 32 AND 1024 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a joining node must present its public key', 'Send the DER of its key.');
    END IF;
    -- One statement consumes the token: of two concurrent joins, the second finds it used.
    UPDATE compute.join_tokens SET state = 'used', used_at = v_now
     WHERE token_sha256 = pg_catalog.sha256(pg_catalog.convert_to(coalesce(p_token, ''), 'UTF8'))
       AND state = 'active' AND expires_at > v_now
    RETURNING * INTO v_token;
    IF NOT FOUND THEN  -- one answer for unknown, used, revoked and expired: no oracle for guessers
        PERFORM compute.raise_error('ACCESS_DENIED', 'the join token is not valid',
            'Mint a new one (joinTokens.create): a token works once, until it expires or is revoked.');
    END IF;
    PERFORM compute.inventory_validate(p_inventory);
    v_node_id := compute.node_register(v_token.pool_id, p_inventory ->> 'hostname', p_inventory);
    UPDATE compute.join_tokens SET used_by_node = v_node_id WHERE token_id = v_token.token_id;
    INSERT INTO compute.node_identities (node_id, public_key, token_id, joined_at)
    VALUES (v_node_id, p_public_key, v_token.token_id, v_now)
    ON CONFLICT (node_id) DO UPDATE SET public_key = EXCLUDED.public_key, token_id = EXCLUDED.token_id, joined_at = EXCLUDED.joined_at;
    RETURN pg_catalog.jsonb_build_object('node_id', v_node_id, 'pool_id', v_token.pool_id,
        'site_id', (SELECT n.site_id FROM compute.nodes AS n WHERE n.node_id = v_node_id));
END
$function$;

CREATE OR REPLACE FUNCTION compute.session_open(p_node_id uuid, p_gateway text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now   timestamptz := compute.compute_now();
    v_epoch bigint;
BEGIN
    PERFORM compute.node_get(p_node_id);
    INSERT INTO compute.node_sessions AS s (node_id, epoch, gateway, opened_at, last_heard_at)
    VALUES (p_node_id, 1, p_gateway, v_now, v_now)
    ON CONFLICT (node_id) DO UPDATE
        SET epoch = s.epoch + 1, gateway = EXCLUDED.gateway, opened_at = EXCLUDED.opened_at,
            last_heard_at = EXCLUDED.last_heard_at, closed_at = NULL
    RETURNING s.epoch INTO v_epoch;
    RETURN v_epoch;
END
$function$;

CREATE OR REPLACE FUNCTION compute.sessions_heard(p_gateway text, p_node_ids uuid[], p_epochs bigint[])
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
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
    SELECT coalesce(pg_catalog.array_agg(b.node_id), '{}') INTO v_fenced
      FROM unnest(p_node_ids, p_epochs) AS b(node_id, epoch)
     WHERE NOT EXISTS (SELECT 1 FROM compute.node_sessions AS s
                        WHERE s.node_id = b.node_id AND s.epoch = b.epoch AND s.closed_at IS NULL);
    RETURN v_fenced;
END
$function$;

CREATE OR REPLACE FUNCTION node_api."join"(p_token text, p_inventory jsonb, p_public_key bytea)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.node_join(p_token, p_inventory, p_public_key) $function$;

COMMENT ON FUNCTION node_api."join"(text,jsonb,bytea) IS 'A node joins with its token, inventory and public key; answers its node id.';

COMMENT ON TABLE compute.node_cas IS NULL;

COMMENT ON TABLE compute.node_intent_keys IS NULL;

COMMENT ON TABLE compute.svid_requests IS NULL;

DROP INDEX compute.join_tokens_ref;

DROP TABLE compute.svid_requests;

DROP TABLE compute.node_intent_keys;

DROP TABLE compute.node_cas;

DROP FUNCTION compute.node_trust_changed();

COMMIT;
