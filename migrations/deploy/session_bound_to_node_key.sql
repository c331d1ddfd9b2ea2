-- Deploy better_compute:session_bound_to_node_key to pg
-- A session opens only for the node's registered key: node_api.session_open(node, gateway, public_key) with the client certificate's key (a released machine's unexpired SVID opens none); the two-argument form answers UNSUPPORTED
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.session_open(uuid,text);

CREATE OR REPLACE FUNCTION compute.session_open(p_node_id uuid, p_gateway text, p_public_key bytea)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.session_open(uuid,text,bytea) IS 'Open a session for the holder of the node''s registered key: a new epoch, which fences every older one.';

CREATE OR REPLACE FUNCTION node_api.session_open(p_node_id uuid, p_gateway text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.raise_error('UNSUPPORTED',
        'node_api.session_open without the certificate''s key: a session opens only for the node''s registered key',
        'Upgrade the gateway to this release: it calls node_api.session_open(node_id, gateway, public_key) with the DER SubjectPublicKeyInfo of the client certificate.');
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION node_api.session_open(uuid,text) IS 'Removed: UNSUPPORTED (a session opens only for the node''s registered key: node_api.session_open(uuid, text, bytea)).';

CREATE OR REPLACE FUNCTION node_api.session_open(p_node_id uuid, p_gateway text, p_public_key bytea)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.session_open(p_node_id, p_gateway, p_public_key) $function$;

COMMENT ON FUNCTION node_api.session_open(uuid,text,bytea) IS 'A new session epoch for the node whose client certificate carries its registered key (fences older sessions).';

GRANT EXECUTE ON FUNCTION node_api.session_open(uuid,text,bytea) TO bc_gateway;

COMMIT;
