-- Revert better_compute:bmc_results_signed_by_the_agent from pg
-- BMC results signed by the site agent's Ed25519 key: relayed by site_api.op_result(agent, envelope), verified by a worker (bmc_ops.result) before they are applied; machines.registerAgent / ops.site_agent_register take the signing key
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.bmc_op_result_append(uuid,jsonb);

DROP FUNCTION compute.bmc_op_result_check(text,jsonb);

DROP FUNCTION compute.bmc_op_result_rejected(bigint,jsonb,text);

DROP FUNCTION compute.bmc_op_result_to_verify(bigint);

DROP FUNCTION compute.bmc_op_result_verified(bigint,jsonb,bytea);

DROP FUNCTION compute.site_agent_register(uuid,uuid,text,bytea,bytea);

DROP FUNCTION compute.site_agent_signing_key_set(uuid,bytea);

DROP FUNCTION ops.site_agent_register(uuid,text,bytea,bytea);

DROP FUNCTION ops.site_agent_signing_key_set(uuid,bytea);

DROP FUNCTION site_api.op_result(uuid,jsonb);

DROP FUNCTION worker_api.bmc_op_result_rejected(bigint,jsonb,text);

DROP FUNCTION worker_api.bmc_op_result_to_verify(bigint);

DROP FUNCTION worker_api.bmc_op_result_verified(bigint,jsonb,bytea);

CREATE OR REPLACE FUNCTION compute.api_machine_agent_json(p_agent compute.site_agents)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('agent_id', p_agent.agent_id, 'site_id', p_agent.site_id, 'name', p_agent.name,
               'key_id', p_agent.key_id, 'public_key', pg_catalog.encode(p_agent.public_key, 'base64'),
               'created_at', p_agent.created_at, 'last_heard_at', p_agent.last_heard_at);
$function$;

COMMENT ON FUNCTION compute.api_machine_agent_json(compute.site_agents) IS 'A site agent as the API answers it (its public key: what credentials are sealed to).';

CREATE OR REPLACE FUNCTION compute.api_machines_register_agent(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_agent_id uuid := compute.site_agent_register(p_resource_id::uuid, compute.input_uuid(p_input, 'site_id'),
                                                   compute.input_text(p_input, 'name'), compute.api_input_bytes(p_input, 'public_key'));
BEGIN
    RETURN (SELECT compute.api_machine_agent_json(a) FROM compute.site_agents AS a WHERE a.agent_id = v_agent_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.bmc_op_result(p_agent_id uuid, p_op_id bigint, p_epoch bigint, p_outcome text, p_result jsonb, p_error text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
-- Lock order: the machine row, then the op row.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_op      compute.bmc_ops;
    v_machine compute.machines;
    v_error   text := left(p_error, 2000);
    v_secret_sha bytea;
    v_token_id uuid;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed', 'unreachable') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown outcome %L', p_outcome), 'Use succeeded, failed or unreachable.');
    END IF;
    IF p_result IS NULL OR pg_catalog.jsonb_typeof(p_result) <> 'object'
       OR (p_result ? 'credentials_version' AND coalesce(p_result ->> 'credentials_version', '') !~ '^[0-9]{1,9}$')
       OR (p_result ? 'join_token_sha256' AND coalesce(p_result ->> 'join_token_sha256', '') !~ '^[0-9a-f]{64}$') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a BMC operation''s result is an object; credentials_version a number, join_token_sha256 64 hex digits',
            'Upgrade the site agent.');
    END IF;
    SELECT * INTO v_machine FROM compute.machines AS m
     WHERE m.machine_id = (SELECT o.machine_id FROM compute.bmc_ops AS o WHERE o.op_id = p_op_id) FOR UPDATE;
    SELECT * INTO v_op FROM compute.bmc_ops AS o WHERE o.op_id = p_op_id FOR UPDATE;
    IF NOT FOUND OR v_op.agent_id <> p_agent_id OR v_op.state <> 'running' OR v_op.epoch <> p_epoch
       OR v_machine.op_epoch <> p_epoch THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('BMC operation %s epoch %s is not the live one', p_op_id, p_epoch),
            'The operation was taken back, cancelled or already answered: drop this result.');
    END IF;
    UPDATE compute.bmc_ops SET state = p_outcome, finished_at = v_now, result = p_result, error = v_error WHERE op_id = p_op_id;
    IF p_outcome = 'unreachable' THEN
        UPDATE compute.machines SET bmc_reachable = false, bmc_unreachable_since = coalesce(bmc_unreachable_since, v_now)
         WHERE machine_id = v_machine.machine_id;
        PERFORM compute.work_poke('machines.reconcile', v_machine.machine_id::text, '{}',
            v_now + compute.limit('bmc_unreachable_retry_seconds') * interval '1 second');
        RETURN 'unreachable';
    END IF;
    -- It answered: reachable again; the time it did not answer does not count against the deadline.
    UPDATE compute.machines
       SET bmc_reachable = true, bmc_unreachable_since = NULL,
           deadline = deadline + CASE WHEN bmc_unreachable_since IS NOT NULL THEN v_now - bmc_unreachable_since ELSE interval '0' END,
           credentials_tried = coalesce((p_result ->> 'credentials_version')::integer, credentials_tried),
           credentials_worked = CASE WHEN p_outcome = 'succeeded'
                                     THEN coalesce((p_result ->> 'credentials_version')::integer, credentials_worked)
                                     ELSE credentials_worked END
     WHERE machine_id = v_machine.machine_id
    RETURNING * INTO v_machine;
    IF p_outcome = 'succeeded' AND v_op.kind = 'verify'
       AND pg_catalog.lower(coalesce(p_result ->> 'system_uuid', '')) <> pg_catalog.lower(v_machine.system_uuid) THEN
        PERFORM compute.machine_transition(v_machine.machine_id, 'fail', pg_catalog.format(
            'the BMC reports system %s, not the enrolled %s: wrong BMC address?', p_result ->> 'system_uuid', v_machine.system_uuid));
        RETURN 'identity mismatch';
    END IF;
    IF p_outcome = 'succeeded' AND v_op.kind = 'vmedia_insert' AND (v_op.args ->> 'join_token')::boolean THEN
        -- The agent made the token and put it in the image's media; the database keeps only its hash.
        v_secret_sha := pg_catalog.decode(coalesce(p_result ->> 'join_token_sha256', ''), 'hex');  -- checked above: hex or absent
        IF octet_length(v_secret_sha) <> 32 THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', 'a vmedia_insert with a join token answers its SHA-256 (64 hex digits)',
                'Upgrade the site agent.');
        END IF;
        UPDATE compute.join_tokens SET state = 'revoked', revoked_at = v_now
         WHERE state = 'active' AND token_id IN (SELECT b.token_id FROM compute.machine_join_tokens AS b WHERE b.machine_id = v_machine.machine_id);
        v_token_id := pg_catalog.gen_random_uuid();
        INSERT INTO compute.join_tokens (token_id, pool_id, token_sha256, state, created_at, expires_at)
        VALUES (v_token_id, v_machine.pool_id, v_secret_sha, 'active', v_now,
                v_now + (compute.limit('machine_deploy_seconds') + compute.limit('machine_deploy_wait_seconds')) * interval '1 second');
        INSERT INTO compute.machine_join_tokens (token_id, machine_id, system_uuid) VALUES (v_token_id, v_machine.machine_id, v_machine.system_uuid);
    END IF;
    IF p_outcome = 'succeeded' THEN
        UPDATE compute.machines SET step = step + 1 WHERE machine_id = v_machine.machine_id;
    ELSE
        UPDATE compute.machines SET failure_count = failure_count + 1, last_error = v_error
         WHERE machine_id = v_machine.machine_id
        RETURNING * INTO v_machine;
        IF v_machine.failure_count >= compute.limit('machine_failures') THEN
            PERFORM compute.machine_transition(v_machine.machine_id, 'fail',
                pg_catalog.format('%s failed %s times; last: %s', v_op.kind, v_machine.failure_count, v_error));
            RETURN 'quarantined';
        END IF;
    END IF;
    PERFORM compute.work_poke('machines.reconcile', v_machine.machine_id::text);
    RETURN p_outcome;
END
$function$;

CREATE OR REPLACE FUNCTION compute.site_agent_register(p_agent_id uuid, p_site_id uuid, p_name text, p_public_key bytea)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_public_key IS NULL OR octet_length(p_public_key) <> 32 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a site agent key is 32 bytes (raw X25519 public key)',
            'Run better-compute serve site-agent --print-public-key and pass what it prints.');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.sites AS s WHERE s.site_id = p_site_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site %s', p_site_id), 'List the sites in ops.pool_capacity.');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid site agent name %L', p_name),
            'Use lower-case letters, digits, ".", "_" and "-" (at most 63).');
    END IF;
    INSERT INTO compute.site_agents (agent_id, site_id, name, public_key, key_id, created_at)
    VALUES (p_agent_id, p_site_id, p_name, p_public_key, left(pg_catalog.encode(pg_catalog.sha256(p_public_key), 'hex'), 16),
            compute.compute_now())
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('site agent %s exists in site %s', p_name, p_site_id),
            'Pick another name, or use the agent that exists (ops.site_agents).');
    END IF;
    RETURN p_agent_id;
END
$function$;

COMMENT ON FUNCTION compute.site_agent_register(uuid,uuid,text,bytea) IS 'Register a site agent (with this id) and the X25519 public key credentials are sealed to.';

CREATE OR REPLACE FUNCTION ops.site_agent_register(p_site_id uuid, p_name text, p_public_key bytea)
 RETURNS uuid
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.site_agent_register(pg_catalog.gen_random_uuid(), p_site_id, p_name, p_public_key)
$function$;

COMMENT ON FUNCTION ops.site_agent_register(uuid,text,bytea) IS 'Register a site agent and the X25519 public key credentials are sealed to.';

GRANT EXECUTE ON FUNCTION ops.site_agent_register(uuid,text,bytea) TO bc_operator;

CREATE OR REPLACE FUNCTION site_api.op_result(p_agent_id uuid, p_op_id bigint, p_epoch bigint, p_outcome text, p_result jsonb, p_error text)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.bmc_op_result(p_agent_id, p_op_id, p_epoch, p_outcome, p_result, p_error) $function$;

COMMENT ON FUNCTION site_api.op_result(uuid,bigint,bigint,text,jsonb,text) IS NULL;

-- By hand: machines.registerAgent as before.
UPDATE api.methods SET summary = 'Register a site agent of a site and the X25519 public key BMC credentials are sealed to.',
       input_schema = '{"type": "object", "properties": {"site_id": {"$piece": "uuid"}, "name": {"$piece": "name"}, "public_key": {"type": "string", "pattern": "^[A-Za-z0-9+/]{43}=$"}, "idempotency_key": {"$piece": "idempotency_key"}}, "required": ["site_id", "name", "public_key"], "additionalProperties": false}'
 WHERE method = 'machines.registerAgent';

-- By hand: the columns the deploy added.
ALTER TABLE compute.bmc_ops DROP COLUMN result_envelope, DROP COLUMN result_rejected;
ALTER TABLE compute.site_agents DROP COLUMN signing_key;

COMMIT;
