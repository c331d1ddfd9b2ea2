-- Deploy better_compute:interoperable_numbers to pg
-- Numbers every reader can load: command args hold integers within 2^53 - 1, written without a decimal
-- point (1.0 reached the signer as a float and could never be signed), nested at most 32 deep; a GPU-hour
-- quota is at most 1e12 (the document's maximum). A 5,000-digit integer stored through ops.call broke
-- every answer that listed it (Python refuses integers over 4,300 digits).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.command_enqueue(p_node_id uuid, p_kind text, p_args jsonb, p_idempotency_key text, p_command_id uuid DEFAULT NULL)
RETURNS compute.node_commands
LANGUAGE plpgsql
AS $$
-- Lock order: the node row (serialises the pending-count check of one node), then the command.
DECLARE
    v_command compute.node_commands;
BEGIN
    PERFORM 1 FROM compute.nodes AS n WHERE n.node_id = p_node_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.node_get(p_node_id);
    END IF;
    IF p_kind IS NULL OR p_kind !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid command kind %L', pg_catalog.left(p_kind, 70)),
            'Use a kind such as collect_inventory, reboot or drain_processes.');
    END IF;
    IF p_args IS NULL OR pg_catalog.jsonb_typeof(p_args) <> 'object' OR pg_catalog.octet_length(p_args::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'command args are a bounded JSON object', 'Send {} for none.');
    END IF;
    -- Signed documents carry integers only (a fraction's spelling does not survive every hop, and
    -- a re-spelled body no longer verifies): a command that could never be signed is refused now.
    -- That includes 1.0: jsonb keeps its decimal point, and the signer reads it as a float.
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_path_query(p_args, 'strict $.** ? (@.type() == "number")') AS n
                WHERE n::text LIKE '%.%') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'command args hold a number with a decimal point',
            'Send integers (1, not 1.0), or decimals as strings (e.g. "0.5").');
    END IF;
    -- ... and integers every JSON reader holds exactly (I-JSON, RFC 7493: within 2^53 - 1; Python
    -- refuses integers of over 4,300 digits), nested at most 32 deep: a command no reader can load
    -- would break every answer that lists it.
    IF pg_catalog.jsonb_path_exists(p_args, 'strict $.** ? (@.type() == "number" && (@ > 9007199254740991 || @ < -9007199254740991))') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'command args hold an integer beyond 2^53 - 1',
            'Send larger numbers as strings (e.g. "18446744073709551615").');
    END IF;
    IF pg_catalog.jsonb_path_exists(p_args, 'strict $.**{33 to last}') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'command args nest deeper than 32 levels', 'Flatten the arguments.');
    END IF;
    IF p_idempotency_key IS NULL OR length(p_idempotency_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a command needs an idempotency key of 1 to 200 characters', 'Use a uuid.');
    END IF;
    SELECT * INTO v_command FROM compute.node_commands AS c WHERE c.node_id = p_node_id AND c.idempotency_key = p_idempotency_key;
    IF FOUND THEN
        IF (v_command.kind, v_command.args) IS DISTINCT FROM (p_kind, p_args) THEN
            PERFORM compute.raise_error('IDEMPOTENCY_MISMATCH',
                pg_catalog.format('idempotency key %L was used for another command', p_idempotency_key), 'Use a new key for another command.');
        END IF;
        RETURN v_command;
    END IF;
    IF (SELECT count(*) FROM compute.node_commands AS c WHERE c.node_id = p_node_id AND c.state = 'pending')
       >= compute.limit('commands_pending_per_node') THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED', 'this node has as many pending commands as it may',
            pg_catalog.format('Wait for some to finish (limit commands_pending_per_node = %s).', compute.limit('commands_pending_per_node')));
    END IF;
    INSERT INTO compute.node_commands (command_id, node_id, kind, args, idempotency_key, state, created_at)
    VALUES (coalesce(p_command_id, pg_catalog.gen_random_uuid()), p_node_id, p_kind, p_args, p_idempotency_key, 'pending', compute.compute_now())
    RETURNING * INTO v_command;
    PERFORM compute.work_poke('node.command.sign', v_command.command_id::text);
    RETURN v_command;
END
$$;
COMMENT ON FUNCTION compute.command_enqueue(uuid, text, jsonb, text, uuid) IS 'Queue a command for a node (bounded, idempotent by key); the worker signs it.';

CREATE OR REPLACE FUNCTION compute.quota_set(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_max_atoms integer,
                                  p_gpu_hours_per_month numeric)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_quota_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    PERFORM compute.pool_get(p_pool_id);
    IF p_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = p_project_id AND p.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in tenant %s', p_project_id, p_tenant_id),
            'Create the project in that tenant first.');
    END IF;
    IF p_max_atoms < 0 OR p_gpu_hours_per_month < 0 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a quota cannot be negative', 'Use 0 to forbid, NULL for no limit.');
    END IF;
    IF p_gpu_hours_per_month > 1e12 THEN  -- the API document's maximum; answers stay numbers every client can read
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('gpu_hours_per_month %s is more than 1e12', pg_catalog.left(p_gpu_hours_per_month::text, 40)),
            'Use at most 1e12 GPU-hours, or NULL for no limit.');
    END IF;
    INSERT INTO compute.quotas AS q (quota_id, tenant_id, project_id, pool_id, max_atoms, gpu_hours_per_month, updated_at)
    VALUES (pg_catalog.gen_random_uuid(), p_tenant_id, p_project_id, p_pool_id, p_max_atoms, p_gpu_hours_per_month,
            compute.compute_now())
    ON CONFLICT (tenant_id, project_id, pool_id) DO UPDATE
        SET max_atoms = EXCLUDED.max_atoms, gpu_hours_per_month = EXCLUDED.gpu_hours_per_month, updated_at = EXCLUDED.updated_at
    RETURNING q.quota_id INTO v_quota_id;
    RETURN v_quota_id;
END
$$;
COMMENT ON FUNCTION compute.quota_set(uuid, uuid, uuid, integer, numeric) IS 'Set a tenant''s (or project''s) quota in a pool; NULL = unlimited.';

COMMIT;
