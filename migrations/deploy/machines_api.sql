-- Deploy better_compute:machines_api to pg
-- API methods machines.* (enroll, manage, provide, release, retry, abort, list, show, registerAgent, agents), one IAM decision each
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.api_input_bytes(p_input jsonb, p_field text)
 RETURNS bytea
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    RETURN pg_catalog.decode(compute.input_text(p_input, p_field), 'base64');
EXCEPTION WHEN invalid_parameter_value OR data_exception THEN
    PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not base64', p_field), 'Pass the bytes base64-encoded.');
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.api_input_bytes(jsonb,text) IS 'A base64 input field''s bytes (INVALID_ARGUMENT when it is not base64).';

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

CREATE OR REPLACE FUNCTION compute.api_machines_abort(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.machine_operator_move(p_resource_id, 'abort', compute.input_text(p_input, 'reason', false)) $function$;

COMMENT ON FUNCTION compute.api_machines_abort(uuid,text,jsonb) IS 'machines.abort';

CREATE OR REPLACE FUNCTION compute.api_machines_agents(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.api_machine_agent_json(a) ORDER BY a.name, a.agent_id), '[]')
      FROM compute.site_agents AS a JOIN compute.sites AS s ON s.site_id = a.site_id
     WHERE s.tenant_id = p_tenant_id AND a.site_id = coalesce(compute.input_uuid(p_input, 'site_id', false), a.site_id)
       AND a.agent_id = coalesce(compute.input_uuid(p_input, 'agent_id', false), a.agent_id);
$function$;

COMMENT ON FUNCTION compute.api_machines_agents(uuid,jsonb) IS 'machines.agents';

CREATE OR REPLACE FUNCTION compute.api_machines_enroll(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
    SELECT compute.machine_enroll(p_resource_id::uuid, compute.input_uuid(p_input, 'agent_id'), compute.input_uuid(p_input, 'pool_id'),
        compute.input_text(p_input, 'name'), compute.input_text(p_input, 'bmc_address'), compute.input_text(p_input, 'system_uuid'),
        compute.input_text(p_input, 'image_url'), compute.input_text(p_input, 'credentials_key_id'),
        compute.api_input_bytes(p_input, 'credentials_box'));
$function$;

COMMENT ON FUNCTION compute.api_machines_enroll(uuid,text,jsonb) IS 'machines.enroll';

CREATE OR REPLACE FUNCTION compute.api_machines_enroll_prepare(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_machine_id uuid := compute.input_uuid(p_input, 'machine_id');
BEGIN
    -- The caller chose the machine's id (its credentials are sealed with it as associated data): it
    -- is the resource IAM decides on. Nothing provisional is written (an id taken is ALREADY_EXISTS
    -- once allowed, so that nothing about it is said before the decision).
    IF NOT EXISTS (SELECT 1 FROM compute.site_agents AS a JOIN compute.sites AS s ON s.site_id = a.site_id
                    WHERE a.agent_id = compute.input_uuid(p_input, 'agent_id') AND s.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site agent %s', p_input ->> 'agent_id'),
            'List this tenant''s site agents (machines.agents).');
    END IF;
    RETURN pg_catalog.jsonb_build_object('id', v_machine_id);
END
$function$;

COMMENT ON FUNCTION compute.api_machines_enroll_prepare(uuid,jsonb) IS 'machines.enroll, before the decision: the machine id the caller chose (its credentials are sealed with it); writes nothing.';

CREATE OR REPLACE FUNCTION compute.api_machines_enroll_void(p_resource_id text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$ BEGIN RETURN; END $function$;

COMMENT ON FUNCTION compute.api_machines_enroll_void(text) IS 'machines.enroll, on deny or expiry: nothing was written before the decision.';

CREATE OR REPLACE FUNCTION compute.api_machines_list(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.machine_json(m) ORDER BY m.name, m.machine_id), '[]')
      FROM (SELECT m.* FROM compute.machines AS m JOIN compute.sites AS s ON s.site_id = m.site_id
             WHERE s.tenant_id = p_tenant_id AND m.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), m.pool_id)
               AND m.state = coalesce(compute.input_text(p_input, 'state', false), m.state)
             ORDER BY m.name, m.machine_id LIMIT compute.list_limit(p_input)) AS m;
$function$;

COMMENT ON FUNCTION compute.api_machines_list(uuid,jsonb) IS 'machines.list (by name)';

CREATE OR REPLACE FUNCTION compute.api_machines_manage(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.machine_operator_move(p_resource_id, 'manage', NULL) $function$;

COMMENT ON FUNCTION compute.api_machines_manage(uuid,text,jsonb) IS 'machines.manage';

CREATE OR REPLACE FUNCTION compute.api_machines_provide(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.machine_operator_move(p_resource_id, 'provide', NULL) $function$;

COMMENT ON FUNCTION compute.api_machines_provide(uuid,text,jsonb) IS 'machines.provide';

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

COMMENT ON FUNCTION compute.api_machines_register_agent(uuid,text,jsonb) IS 'machines.registerAgent';

CREATE OR REPLACE FUNCTION compute.api_machines_release(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.machine_operator_move(p_resource_id, 'release', NULL) $function$;

COMMENT ON FUNCTION compute.api_machines_release(uuid,text,jsonb) IS 'machines.release';

CREATE OR REPLACE FUNCTION compute.api_machines_retry(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.machine_operator_move(p_resource_id, 'retry', NULL) $function$;

COMMENT ON FUNCTION compute.api_machines_retry(uuid,text,jsonb) IS 'machines.retry';

CREATE OR REPLACE FUNCTION compute.api_machines_show(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$ SELECT compute.machine_show(compute.input_uuid(p_input, 'machine_id')::text) $function$;

COMMENT ON FUNCTION compute.api_machines_show(uuid,jsonb) IS 'machines.show';

CREATE OR REPLACE FUNCTION compute.machine_enroll(p_machine_id uuid, p_agent_id uuid, p_pool_id uuid, p_name text, p_bmc_address text, p_system_uuid text, p_image_url text, p_credentials_key_id text, p_credentials_box bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_agent   compute.site_agents;
    v_machine compute.machines;
BEGIN
    SELECT * INTO v_agent FROM compute.site_agents AS a WHERE a.agent_id = p_agent_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site agent %s', p_agent_id), 'List them in ops.site_agents.');
    END IF;
    IF (SELECT p.site_id FROM compute.pools AS p WHERE p.pool_id = p_pool_id) IS DISTINCT FROM v_agent.site_id THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the pool is not in the site agent''s site',
            'A machine joins a pool of the site whose agent reaches its BMC.');
    END IF;
    IF p_credentials_key_id IS DISTINCT FROM v_agent.key_id THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the credentials are not sealed to the site agent''s key',
            pg_catalog.format('Seal them to key %s (better-compute machines enroll does).', v_agent.key_id));
    END IF;
    BEGIN
        INSERT INTO compute.machines (machine_id, site_id, pool_id, agent_id, name, bmc_address, system_uuid, image_url, state, state_since, created_at)
        VALUES (p_machine_id, v_agent.site_id, p_pool_id, p_agent_id, p_name, p_bmc_address, pg_catalog.lower(p_system_uuid), p_image_url,
                'enrolled', v_now, v_now)
        RETURNING * INTO v_machine;
        INSERT INTO compute.machine_credentials (machine_id, version, key_id, box, created_at)
        VALUES (p_machine_id, 1, p_credentials_key_id, p_credentials_box, v_now);
    EXCEPTION
        WHEN unique_violation THEN
            PERFORM compute.raise_error('ALREADY_EXISTS', 'a machine with this id, name or system uuid is enrolled',
                'List the machines in ops.machines.');
        WHEN check_violation OR not_null_violation THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', 'invalid machine: ' || SQLERRM,
                'Name: letters, digits, ".", "_", "-"; BMC address and image URL: http(s) URLs; system uuid: 32 hex digits.');
    END;
    RETURN compute.machine_json(v_machine);
END
$function$;

COMMENT ON FUNCTION compute.machine_enroll(uuid,uuid,uuid,text,text,text,text,text,bytea) IS 'Enroll a machine by its BMC; credentials only as a box sealed to the agent''s key (with the machine id as associated data).';

CREATE OR REPLACE FUNCTION compute.machine_show(p_machine text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT compute.machine_json(m) || pg_catalog.jsonb_build_object('operations',
               (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(o) ORDER BY o.op_id DESC), '[]')
                  FROM (SELECT o.op_id, o.epoch, o.state_name, o.generation, o.step, o.kind, o.state, o.created_at, o.finished_at, o.error
                          FROM compute.bmc_ops AS o WHERE o.machine_id = m.machine_id ORDER BY o.op_id DESC LIMIT 20) AS o))
      FROM compute.machine_get(p_machine) AS m
$function$;

COMMENT ON FUNCTION compute.machine_show(text) IS 'One machine and its last 20 BMC operations.';

CREATE OR REPLACE FUNCTION compute.resource_describe(p_type text, p_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
-- {"tenantId", "parent": {"type", "id"} | null, "attributes"} of an existing resource; NULL when
-- there is none (or the id is not an id of that type). Sites without a tenant are nobody's here.
DECLARE
    v_uuid uuid;
BEGIN
    IF p_type = 'compute-audit-event' THEN
        RETURN (SELECT pg_catalog.jsonb_build_object('tenantId', e.tenant_id, 'parent', NULL,
                           'attributes', pg_catalog.jsonb_build_object('action', e.action))
                  FROM compute.audit_events AS e
                 WHERE p_id ~ '^[0-9]{1,18}$' AND e.event_id = p_id::bigint);
    END IF;
    IF p_id IS NULL OR p_id !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN NULL;
    END IF;
    v_uuid := p_id::uuid;
    RETURN CASE p_type
        WHEN 'compute-site' THEN
            (SELECT compute.resource_json(s.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', s.name))
               FROM compute.sites AS s WHERE s.site_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-pool' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-site', s.site_id::text,
                        pg_catalog.jsonb_build_object('name', p.name, 'gpu_model', p.gpu_model, 'placement_policy', p.placement_policy))
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-quota' THEN  -- a quota is named by its pool (and the project in its attributes)
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', p.pool_id::text, '{}')
               FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE p.pool_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-offering' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', o.pool_id::text,
                        pg_catalog.jsonb_build_object('shape', o.shape))
               FROM compute.offerings AS o JOIN compute.pools AS p ON p.pool_id = o.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE o.offering_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-node' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', n.pool_id::text, pg_catalog.jsonb_build_object('name', n.name))
               FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
              WHERE n.node_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-join-token' THEN
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', j.pool_id::text, pg_catalog.jsonb_build_object('state', j.state))
               FROM compute.join_tokens AS j JOIN compute.pools AS p ON p.pool_id = j.pool_id JOIN compute.sites AS s ON s.site_id = p.site_id
              WHERE j.token_id = v_uuid)
        WHEN 'compute-project' THEN
            (SELECT compute.resource_json(p.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('name', p.name))
               FROM compute.projects AS p WHERE p.project_id = v_uuid)
        WHEN 'compute-reservation' THEN
            (SELECT compute.resource_json(r.tenant_id, 'compute-pool', r.pool_id::text,
                        pg_catalog.jsonb_build_object('state', r.state, 'shape', r.shape, 'count', r.count, 'project_id', r.project_id))
               FROM compute.reservations AS r WHERE r.reservation_id = v_uuid)
        WHEN 'compute-instance' THEN
            (SELECT compute.resource_json(i.tenant_id, 'compute-pool', i.pool_id::text,
                        pg_catalog.jsonb_build_object('state', i.state, 'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib,
                                                      'project_id', i.project_id))
               FROM compute.instances AS i WHERE i.instance_id = v_uuid)
        WHEN 'compute-machine' THEN  -- sql/700_machines.sql
            (SELECT compute.resource_json(s.tenant_id, 'compute-pool', m.pool_id::text,
                        pg_catalog.jsonb_build_object('name', m.name, 'state', m.state))
               FROM compute.machines AS m JOIN compute.sites AS s ON s.site_id = m.site_id
              WHERE m.machine_id = v_uuid AND s.tenant_id IS NOT NULL)
        WHEN 'compute-webhook' THEN
            (SELECT compute.resource_json(w.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('active', w.active))
               FROM compute.webhooks AS w WHERE w.webhook_id = v_uuid)
        END;
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

CREATE OR REPLACE FUNCTION ops.machine_enroll(p_machine_id uuid, p_agent_id uuid, p_pool_id uuid, p_name text, p_bmc_address text, p_system_uuid text, p_image_url text, p_credentials_key_id text, p_credentials_box bytea)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.machine_enroll(p_machine_id, p_agent_id, p_pool_id, p_name, p_bmc_address, p_system_uuid, p_image_url,
                                  p_credentials_key_id, p_credentials_box)
$function$;

CREATE OR REPLACE FUNCTION ops.machine_show(p_machine text)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.machine_show(p_machine) $function$;

COMMENT ON FUNCTION ops.machine_show(text) IS 'One machine and its last 20 BMC operations (machines.show).';

CREATE OR REPLACE FUNCTION ops.site_agent_register(p_site_id uuid, p_name text, p_public_key bytea)
 RETURNS uuid
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.site_agent_register(pg_catalog.gen_random_uuid(), p_site_id, p_name, p_public_key)
$function$;

-- By hand, after their functions: the catalog rows of machines.*.
INSERT INTO api.methods (method, action, resource_type, kind, summary, input_schema, function, resource_key, parent_type,
                         parent_key, prepare_function, void_function, event_type) VALUES
    ('machines.registerAgent', 'compute:machines:registerAgent', 'compute-site-agent', 'mutation',
     'Register a site agent of a site and the X25519 public key BMC credentials are sealed to.',
     '{"type":"object","properties":{"site_id":{"$piece":"uuid"},"name":{"$piece":"name"},"public_key":{"type":"string","pattern":"^[A-Za-z0-9+/]{43}=$"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["site_id","name","public_key"],"additionalProperties":false}',
     'compute.api_machines_register_agent(uuid, text, jsonb)', NULL, 'compute-site', 'site_id', NULL, NULL, NULL),
    ('machines.agents', 'compute:machines:agents', 'compute-site-agent', 'read',
     'The site agents (of one site) and the public keys to seal BMC credentials to.',
     '{"type":"object","properties":{"site_id":{"$piece":"uuid"},"agent_id":{"$piece":"uuid"}},"required":[],"additionalProperties":false}',
     'compute.api_machines_agents(uuid, jsonb)', NULL, 'compute-site', 'site_id', NULL, NULL, NULL),
    ('machines.enroll', 'compute:machines:enroll', 'compute-machine', 'mutation',
     'Enroll a machine by its BMC, its credentials sealed to the site agent''s key with the machine id (better-compute machines enroll seals them).',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"agent_id":{"$piece":"uuid"},"pool_id":{"$piece":"uuid"},"name":{"type":"string","pattern":"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"},"bmc_address":{"type":"string","maxLength":500,"pattern":"^https?://[^\\s/]+(/\\S*)?$"},"system_uuid":{"type":"string","pattern":"^[0-9A-Fa-f-]{32,36}$"},"image_url":{"type":"string","maxLength":2000,"pattern":"^https?://\\S+$"},"credentials_key_id":{"type":"string","pattern":"^[0-9a-f]{16}$"},"credentials_box":{"type":"string","minLength":64,"maxLength":5464,"pattern":"^[A-Za-z0-9+/]+={0,2}$","writeOnly":true},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id","agent_id","pool_id","name","bmc_address","system_uuid","image_url","credentials_key_id","credentials_box"],"additionalProperties":false}',
     'compute.api_machines_enroll(uuid, text, jsonb)', NULL, 'compute-pool', 'pool_id',
     'compute.api_machines_enroll_prepare(uuid, jsonb)', 'compute.api_machines_enroll_void(text)', NULL),
    ('machines.manage', 'compute:machines:manage', 'compute-machine', 'mutation',
     'enrolled / manageable -> verifying: the site agent checks the BMC and the system.',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_manage(uuid, text, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL),
    ('machines.provide', 'compute:machines:provide', 'compute-machine', 'mutation',
     'manageable -> deploying: the BMC boots the image with bcd; the machine joins its pool.',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_provide(uuid, text, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL),
    ('machines.release', 'compute:machines:release', 'compute-machine', 'mutation',
     'active -> cleaning (its node key revoked at once), then deployed again; refused while a bare_metal reservation holds it.',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_release(uuid, text, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL),
    ('machines.retry', 'compute:machines:retry', 'compute-machine', 'mutation',
     'A failed (quarantined) state -> the state it failed in.',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_retry(uuid, text, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL),
    ('machines.abort', 'compute:machines:abort', 'compute-machine', 'mutation',
     'In flight -> its failed state; a failed state -> enrolled / manageable.',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"},"reason":{"$piece":"reason"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_abort(uuid, text, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL),
    ('machines.list', 'compute:machines:list', 'compute-machine', 'read',
     'The machines (of one pool, in one state): state, quarantined, deadline, failures, BmcReachable.',
     '{"type":"object","properties":{"pool_id":{"$piece":"uuid"},"state":{"type":"string","enum":["enrolled","verifying","manageable","deploying","deploy_wait","active","cleaning","available","verify_failed","deploy_failed","clean_failed"]},"limit":{"$piece":"list_limit"}},"required":[],"additionalProperties":false}',
     'compute.api_machines_list(uuid, jsonb)', NULL, 'compute-pool', 'pool_id', NULL, NULL, NULL),
    ('machines.show', 'compute:machines:show', 'compute-machine', 'read',
     'One machine and its last 20 BMC operations (never its credentials).',
     '{"type":"object","properties":{"machine_id":{"$piece":"uuid"}},"required":["machine_id"],"additionalProperties":false}',
     'compute.api_machines_show(uuid, jsonb)', 'machine_id', NULL, NULL, NULL, NULL, NULL);

COMMIT;
