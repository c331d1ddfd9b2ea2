-- Revert better_compute:machines_register_agent_signing_key from pg
-- machines.registerAgent takes the agent's signing key; agents answer it
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

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

-- By hand: machines.registerAgent takes the signing key.
UPDATE api.methods SET summary = 'Register a site agent of a site and the X25519 public key BMC credentials are sealed to.',
       input_schema = '{"type": "object", "properties": {"site_id": {"$piece": "uuid"}, "name": {"$piece": "name"}, "public_key": {"type": "string", "pattern": "^[A-Za-z0-9+/]{43}=$"}, "idempotency_key": {"$piece": "idempotency_key"}}, "required": ["site_id", "name", "public_key"], "additionalProperties": false}'
 WHERE method = 'machines.registerAgent';

COMMIT;
