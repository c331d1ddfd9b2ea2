-- Deploy better_compute:agent_sessions_by_id to pg
-- A site agent's session has a random id, new at each open: agent_api.ops_claim / op_result / session_close name it, and the agent comes from the session row, never from a parameter
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- by hand: the column.
ALTER TABLE compute.site_agent_sessions ADD COLUMN session_id uuid CONSTRAINT site_agent_sessions_session_id_key UNIQUE;
COMMENT ON COLUMN compute.site_agent_sessions.session_id IS 'The current session''s id (random, new at every open): what the gateway names in agent_api calls.';

DROP FUNCTION agent_api.op_result(uuid,bigint,jsonb);

DROP FUNCTION agent_api.ops_claim(uuid,bigint,integer);

DROP FUNCTION agent_api.session_close(uuid,bigint);

DROP FUNCTION compute.agent_session_require(uuid,bigint);

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

DROP FUNCTION agent_api.session_open(uuid,uuid,text,bytea);

CREATE OR REPLACE FUNCTION agent_api.session_open(p_agent_id uuid, p_site_id uuid, p_gateway text, p_public_key bytea)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.agent_session_open(p_agent_id, p_site_id, p_gateway, p_public_key) $function$;

COMMENT ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) IS 'Open the session of the agent whose certificate the gateway verified; answers {session_id, epoch}.';

GRANT EXECUTE ON FUNCTION agent_api.session_open(uuid,uuid,text,bytea) TO bc_gateway;

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

DROP FUNCTION compute.agent_session_open(uuid,uuid,text,bytea);

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

COMMIT;
