-- Revert better_compute:machines_api from pg
-- API methods machines.* (enroll, manage, provide, release, retry, abort, list, show, registerAgent, agents), one IAM decision each
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- By hand: the catalog rows of machines.* (and the admissions that name them).
DELETE FROM compute.admissions WHERE method LIKE 'machines.%';
DELETE FROM api.methods WHERE method LIKE 'machines.%';

DROP FUNCTION compute.api_input_bytes(jsonb,text);

DROP FUNCTION compute.api_machine_agent_json(compute.site_agents);

DROP FUNCTION compute.api_machines_abort(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_agents(uuid,jsonb);

DROP FUNCTION compute.api_machines_enroll(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_enroll_prepare(uuid,jsonb);

DROP FUNCTION compute.api_machines_enroll_void(text);

DROP FUNCTION compute.api_machines_list(uuid,jsonb);

DROP FUNCTION compute.api_machines_manage(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_provide(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_register_agent(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_release(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_retry(uuid,text,jsonb);

DROP FUNCTION compute.api_machines_show(uuid,jsonb);

DROP FUNCTION compute.machine_enroll(uuid,uuid,uuid,text,text,text,text,text,bytea);

DROP FUNCTION compute.machine_show(text);

DROP FUNCTION compute.site_agent_register(uuid,uuid,text,bytea);

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
        WHEN 'compute-webhook' THEN
            (SELECT compute.resource_json(w.tenant_id, NULL, NULL, pg_catalog.jsonb_build_object('active', w.active))
               FROM compute.webhooks AS w WHERE w.webhook_id = v_uuid)
        END;
END
$function$;

CREATE OR REPLACE FUNCTION ops.machine_enroll(p_machine_id uuid, p_agent_id uuid, p_pool_id uuid, p_name text, p_bmc_address text, p_system_uuid text, p_image_url text, p_credentials_key_id text, p_credentials_box bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
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

CREATE OR REPLACE FUNCTION ops.machine_show(p_machine text)
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT compute.machine_json(m) || pg_catalog.jsonb_build_object('operations',
               (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(o) ORDER BY o.op_id DESC), '[]')
                  FROM (SELECT o.op_id, o.epoch, o.state_name, o.generation, o.step, o.kind, o.state, o.created_at, o.finished_at, o.error
                          FROM compute.bmc_ops AS o WHERE o.machine_id = m.machine_id ORDER BY o.op_id DESC LIMIT 20) AS o))
      FROM compute.machine_get(p_machine) AS m
$function$;

COMMENT ON FUNCTION ops.machine_show(text) IS 'One machine and its last 20 BMC operations (better-compute machines show).';

CREATE OR REPLACE FUNCTION ops.site_agent_register(p_site_id uuid, p_name text, p_public_key bytea)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_agent_id uuid := pg_catalog.gen_random_uuid();
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
    VALUES (v_agent_id, p_site_id, p_name, p_public_key, left(pg_catalog.encode(pg_catalog.sha256(p_public_key), 'hex'), 16),
            compute.compute_now())
    ON CONFLICT (site_id, name) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('site agent %s exists in site %s', p_name, p_site_id),
            'Pick another name, or use the agent that exists (ops.site_agents).');
    END IF;
    RETURN v_agent_id;
END
$function$;

COMMIT;
