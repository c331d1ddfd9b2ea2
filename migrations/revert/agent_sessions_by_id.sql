-- Revert better_compute:agent_sessions_by_id from pg
-- A site agent's session has a random id, new at each open: agent_api.ops_claim / op_result / session_close name it, and the agent comes from the session row, never from a parameter
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- by hand: the column.
ALTER TABLE compute.site_agent_sessions DROP COLUMN session_id;

DROP FUNCTION agent_api.op_result(uuid,jsonb);

DROP FUNCTION agent_api.ops_claim(uuid,integer);

DROP FUNCTION agent_api.session_close(uuid);

DROP FUNCTION compute.agent_of_session(uuid);

CREATE OR REPLACE FUNCTION agent_api.op_result(p_agent_id uuid, p_epoch bigint, p_envelope jsonb)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.agent_session_require(p_agent_id, p_epoch);
    RETURN compute.bmc_op_result_append(p_agent_id, p_envelope);
END
$function$;

COMMENT ON FUNCTION agent_api.op_result(uuid,bigint,jsonb) IS 'Relay the session''s agent''s signed result of a running op, as it is; a worker verifies and applies it.';

GRANT EXECUTE ON FUNCTION agent_api.op_result(uuid,bigint,jsonb) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.ops_claim(p_agent_id uuid, p_epoch bigint, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.agent_session_require(p_agent_id, p_epoch);
    RETURN compute.bmc_ops_claim(p_agent_id, p_limit);
END
$function$;

COMMENT ON FUNCTION agent_api.ops_claim(uuid,bigint,integer) IS 'Claim queued BMC operations of the session''s agent (FENCED unless the session is current).';

GRANT EXECUTE ON FUNCTION agent_api.ops_claim(uuid,bigint,integer) TO bc_gateway;

CREATE OR REPLACE FUNCTION agent_api.session_close(p_agent_id uuid, p_epoch bigint)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    UPDATE compute.site_agent_sessions SET closed_at = compute.compute_now()
     WHERE agent_id = p_agent_id AND epoch = p_epoch AND closed_at IS NULL
    RETURNING true
$function$;

COMMENT ON FUNCTION agent_api.session_close(uuid,bigint) IS 'The agent''s session ended (nothing else changes: its running ops are taken back after bmc_op_seconds).';

GRANT EXECUTE ON FUNCTION agent_api.session_close(uuid,bigint) TO bc_gateway;

DROP FUNCTION agent_api.session_open(uuid,uuid,text,bytea);

CREATE OR REPLACE FUNCTION agent_api.session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.agent_session_open(p_agent_id, p_site_id, p_gateway, p_public_key) $function$;

COMMENT ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) IS 'Open the session of the agent whose certificate the gateway verified; answers its epoch.';

GRANT EXECUTE ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) TO bc_gateway;

DROP FUNCTION compute.agent_session_open(uuid,uuid,text,bytea);

CREATE OR REPLACE FUNCTION compute.agent_session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
-- Lock order: the agent's session row (the update).
DECLARE
    v_epoch bigint;
BEGIN
    UPDATE compute.site_agent_sessions AS s
       SET epoch = s.epoch + 1, gateway = p_gateway, opened_at = compute.compute_now(), closed_at = NULL
      FROM compute.site_agents AS a
     WHERE s.agent_id = p_agent_id AND a.agent_id = s.agent_id AND a.site_id = p_site_id
       AND s.certified_key = p_public_key AND s.signing_key = a.signing_key
    RETURNING s.epoch INTO v_epoch;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('ACCESS_DENIED',
            pg_catalog.format('the certificate''s key is not the key certified for site agent %s of site %s under its registered signing key',
                              p_agent_id, p_site_id),
            'The agent was not registered, its signing key was replaced or removed (ops.site_agent_signing_key_set), or a newer certificate was issued: the agent asks for a new certificate.');
    END IF;
    RETURN v_epoch;
END
$function$;

COMMENT ON FUNCTION compute.agent_session_open(uuid,uuid,text,bytea) IS 'Open a session for the holder of the agent''s certified key: a new epoch, which fences every older one.';

CREATE OR REPLACE FUNCTION compute.agent_session_require(p_agent_id uuid, p_epoch bigint)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.site_agent_sessions AS s JOIN compute.site_agents AS a ON a.agent_id = s.agent_id
                    WHERE s.agent_id = p_agent_id AND s.epoch = p_epoch AND s.closed_at IS NULL
                      AND s.signing_key = a.signing_key) THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('session epoch %s of site agent %s is not current', p_epoch, p_agent_id),
            'A newer session of the agent exists, or its signing key changed: the agent dials again.');
    END IF;
END
$function$;

COMMENT ON FUNCTION compute.agent_session_require(uuid,bigint) IS 'FENCED unless the epoch is the agent''s open session under its current signing key.';

COMMIT;
