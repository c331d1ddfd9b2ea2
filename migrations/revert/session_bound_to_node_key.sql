-- Revert better_compute:session_bound_to_node_key from pg
-- A session opens only for the node's registered key: node_api.session_open(node, gateway, public_key) with the client certificate's key (a released machine's unexpired SVID opens none); the two-argument form answers UNSUPPORTED
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.session_open(uuid,text,bytea);

DROP FUNCTION node_api.session_open(uuid,text,bytea);

CREATE OR REPLACE FUNCTION compute.session_open(p_node_id uuid, p_gateway text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now   timestamptz := compute.compute_now();
    v_epoch bigint;
BEGIN
    PERFORM compute.node_get(p_node_id);
    PERFORM compute.node_not_quarantined(p_node_id);
    INSERT INTO compute.node_sessions AS s (node_id, epoch, gateway, opened_at, last_heard_at)
    VALUES (p_node_id, 1, p_gateway, v_now, v_now)
    ON CONFLICT (node_id) DO UPDATE
        SET epoch = s.epoch + 1, gateway = EXCLUDED.gateway, opened_at = EXCLUDED.opened_at,
            last_heard_at = EXCLUDED.last_heard_at, closed_at = NULL
    RETURNING s.epoch INTO v_epoch;
    RETURN v_epoch;
END
$function$;

COMMENT ON FUNCTION compute.session_open(uuid,text) IS 'Open a session: a new epoch, which fences every older one.';

CREATE OR REPLACE FUNCTION node_api.session_open(p_node_id uuid, p_gateway text)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.session_open(p_node_id, p_gateway) $function$;

COMMENT ON FUNCTION node_api.session_open(uuid,text) IS 'A new session epoch for the node (fences older sessions).';

COMMIT;
