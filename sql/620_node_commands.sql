-- Commands (docs/architecture.md §8, P2, P3, P11): one-shot actions for a node (`collect_inventory`, `reboot`,
-- `drain_processes`, …), queued with an idempotency key and a bound on pending ones per node,
-- delivered at least once (again after node_command_redelivery_seconds until a result comes);
-- the daemon executes each command id once (its journal) and answers UNSUPPORTED for a kind it
-- does not know. Like specs, a command goes down only signed by the worker (P14).
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.node_commands (
    command_id      uuid CONSTRAINT node_commands_pkey PRIMARY KEY,
    node_id         uuid NOT NULL CONSTRAINT node_commands_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    kind            text NOT NULL CONSTRAINT node_commands_kind_check CHECK (kind ~ '^[a-z][a-z0-9_]{0,62}$'),
    args            jsonb NOT NULL DEFAULT '{}' CONSTRAINT node_commands_args_check CHECK (jsonb_typeof(args) = 'object'),
    idempotency_key text NOT NULL CONSTRAINT node_commands_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    state           text NOT NULL CONSTRAINT node_commands_state_check CHECK (state IN ('pending', 'succeeded', 'failed', 'unsupported')),
    envelope        jsonb,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    deliveries      integer NOT NULL DEFAULT 0,
    finished_at     timestamptz,
    output          text,
    CONSTRAINT node_commands_node_id_idempotency_key_key UNIQUE (node_id, idempotency_key),
    CONSTRAINT node_commands_pending_until_finished CHECK ((state = 'pending') = (finished_at IS NULL))
);
CREATE INDEX node_commands_pending ON compute.node_commands (node_id, created_at) WHERE state = 'pending';
COMMENT ON TABLE compute.node_commands IS 'One-shot actions for nodes: kind, args, idempotency key, the signed envelope, delivery and result.';

CREATE FUNCTION compute.command_json(p_command compute.node_commands)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('command_id', p_command.command_id, 'node_id', p_command.node_id, 'kind', p_command.kind,
        'args', p_command.args, 'state', p_command.state, 'created_at', p_command.created_at, 'deliveries', p_command.deliveries,
        'finished_at', p_command.finished_at, 'output', p_command.output);
$$;
COMMENT ON FUNCTION compute.command_json(compute.node_commands) IS 'A command as the API answers it.';

CREATE FUNCTION compute.command_enqueue(p_node_id uuid, p_kind text, p_args jsonb, p_idempotency_key text, p_command_id uuid DEFAULT NULL)
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

-- -- signing (worker) and the node side (gateway) ---------------------------------------------------

CREATE FUNCTION worker_api.command_to_sign(p_command_id uuid)
RETURNS TABLE (node_id uuid, command jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT c.node_id, pg_catalog.jsonb_build_object('command_id', c.command_id, 'node_id', c.node_id, 'kind', c.kind, 'args', c.args)
      FROM compute.node_commands AS c WHERE c.command_id = p_command_id AND c.envelope IS NULL AND c.state = 'pending'
$$;
COMMENT ON FUNCTION worker_api.command_to_sign(uuid) IS 'The command the worker must sign (none once signed or finished).';

CREATE FUNCTION worker_api.command_signed(p_command_id uuid, p_envelope jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    v_node_id uuid;
BEGIN
    UPDATE compute.node_commands SET envelope = p_envelope WHERE command_id = p_command_id AND envelope IS NULL
    RETURNING node_id INTO v_node_id;
    IF v_node_id IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('bc_node_command', v_node_id::text);
    END IF;
END
$$;
COMMENT ON FUNCTION worker_api.command_signed(uuid, jsonb) IS 'Store a command''s signed envelope and poke gateways.';

CREATE FUNCTION node_api.commands_due(p_node_id uuid, p_epoch bigint)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    v_now      timestamptz := compute.compute_now();
    v_commands jsonb;
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    -- At least once: never delivered, or delivered long enough ago without a result.
    WITH due AS (
        UPDATE compute.node_commands AS c SET delivered_at = v_now, deliveries = c.deliveries + 1
         WHERE c.command_id IN (SELECT x.command_id FROM compute.node_commands AS x
                                 WHERE x.node_id = p_node_id AND x.state = 'pending' AND x.envelope IS NOT NULL
                                   AND (x.delivered_at IS NULL
                                        OR x.delivered_at < v_now - compute.limit('node_command_redelivery_seconds') * interval '1 second')
                                 ORDER BY x.created_at LIMIT compute.limit('commands_pending_per_node'))
        RETURNING c.envelope, c.created_at)
    SELECT coalesce(pg_catalog.jsonb_agg(d.envelope ORDER BY d.created_at), '[]') INTO v_commands FROM due AS d;
    RETURN v_commands;
END
$$;
COMMENT ON FUNCTION node_api.commands_due(uuid, bigint) IS 'Signed commands to deliver to the node now (at least once).';

-- -- API methods (catalog rows in sql/690_api_methods.sql) -------------------------------------------

CREATE FUNCTION compute.api_nodes_command(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_args jsonb := coalesce(compute.request_field(p_input, 'args', 'object', false), '{}');
BEGIN
    -- The request's idempotency key is the command's too (a request without one: a new command).
    RETURN compute.command_json(compute.command_enqueue(p_resource_id::uuid, compute.input_text(p_input, 'kind'), v_args,
        coalesce(compute.input_text(p_input, 'idempotency_key', false), pg_catalog.gen_random_uuid()::text)));
END
$$;
COMMENT ON FUNCTION compute.api_nodes_command(uuid, text, jsonb) IS 'nodes.command: queue a one-shot command for a node';

CREATE FUNCTION compute.api_nodes_commands(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.command_json(c) ORDER BY c.created_at DESC), '[]')
      FROM (SELECT * FROM compute.node_commands AS c WHERE c.node_id = compute.input_uuid(p_input, 'node_id')
             ORDER BY c.created_at DESC LIMIT compute.list_limit(p_input)) AS c;
$$;
COMMENT ON FUNCTION compute.api_nodes_commands(uuid, jsonb) IS 'nodes.commands: a node''s commands, newest first';

-- -- the gateway's poll (one statement per interval for all its sessions) ---------------------------

CREATE FUNCTION node_api.push_due(p_node_ids uuid[], p_sent_generations bigint[])
RETURNS TABLE (node_id uuid, spec boolean, commands boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    -- Of a gateway's sessions (with the spec generation each was last sent), those with a newer
    -- signed spec or commands due: the poll timer's one statement instead of two per session.
    SELECT x.node_id, x.spec, x.commands
      FROM (SELECT b.node_id,
                   coalesce(s.signed_generation IS DISTINCT FROM b.sent AND s.signed_generation IS NOT NULL, false) AS spec,
                   EXISTS (SELECT 1 FROM compute.node_commands AS c
                            WHERE c.node_id = b.node_id AND c.state = 'pending' AND c.envelope IS NOT NULL
                              AND (c.delivered_at IS NULL OR c.delivered_at < compute.compute_now()
                                   - compute.limit('node_command_redelivery_seconds') * interval '1 second')) AS commands
              FROM unnest(p_node_ids, p_sent_generations) AS b(node_id, sent)
              LEFT JOIN compute.node_specs AS s ON s.node_id = b.node_id) AS x
     WHERE x.spec OR x.commands
$$;
COMMENT ON FUNCTION node_api.push_due(uuid[], bigint[]) IS 'The gateway''s poll: which of its sessions have a newer signed spec or commands due.';
