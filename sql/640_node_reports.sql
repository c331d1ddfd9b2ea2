-- What a node says takes effect only once something other than the gateway verified the node's
-- signature (P14, docs/architecture.md §8). A gateway is a relay: node_api.report only appends the envelope, as
-- received, to the node's inbox (compute.node_reports), fenced by the session epoch; it pokes work
-- 'node.reports' for the node. The worker (bc_worker) reads the node's pending reports with its
-- registered public key, verifies each signature (PostgreSQL 15 cannot verify ECDSA or Ed25519),
-- and then either hands the report back as verified (worker_api.node_report_verified), which
-- applies it through the compute functions below, or rejects it with the reason
-- (worker_api.node_report_rejected). A rejected report is kept (the newest
-- node_reports_rejected_kept per node, ops.node_reports_rejected) and emits the node's event
-- 'node.report_rejected'; it never takes effect.
--
-- A report's body binds the node id, the session epoch it was sent under and a sequence number
-- the daemon counts per session (node_id, epoch, seq): the worker applies a node's reports only
-- in strictly increasing (epoch, seq), so a gateway replaying what a node signed before changes
-- nothing. Purposes (the envelope's, covered by the signature): node.inventory {inventory},
-- node.observed {generation, conditions}, node.result {command_id, status, output}, node.key
-- {public_key, proof}: a new key, signed by the registered (old) key, with the new key's own
-- signature (proof of possession, checked by the worker as well).
--
-- Heartbeats, session_open and session_close stay unsigned: they only move Connected, a condition
-- that changes no ownership (P6), and a gateway that lies about them can only make a node look
-- disconnected, which it could by dropping its connection anyway.
SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('node_reports_pending_per_node', 1024, 'count', 'Reports of one node appended by gateways and not yet verified by a worker.'),
    ('node_reports_rejected_kept',     100, 'count', 'Rejected reports kept per node (the newest), for operators.');

CREATE TABLE compute.node_reports (
    report_id   bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT node_reports_pkey PRIMARY KEY,
    node_id     uuid NOT NULL CONSTRAINT node_reports_node_id_fkey REFERENCES compute.nodes ON DELETE CASCADE,
    epoch       bigint NOT NULL,
    envelope    jsonb NOT NULL CONSTRAINT node_reports_envelope_check CHECK (jsonb_typeof(envelope) = 'object'),
    received_at timestamptz NOT NULL,
    state       text NOT NULL DEFAULT 'pending' CONSTRAINT node_reports_state_check CHECK (state IN ('pending', 'rejected')),
    reason      text CONSTRAINT node_reports_reason_check CHECK (length(reason) <= 1000),
    decided_at  timestamptz,
    CONSTRAINT node_reports_rejected_has_reason CHECK ((state = 'rejected') = (reason IS NOT NULL AND decided_at IS NOT NULL))
);
CREATE INDEX node_reports_pending ON compute.node_reports (node_id, epoch, report_id) WHERE state = 'pending';
CREATE INDEX node_reports_rejected ON compute.node_reports (node_id, report_id) WHERE state = 'rejected';
COMMENT ON TABLE compute.node_reports IS 'The nodes'' inbox: signed reports as gateways relayed them, until a worker verified (and applied) or rejected them.';

-- -- applying what a node reported (called only with a verified report) ----------------------------

CREATE FUNCTION compute.node_inventory_reported(p_node_id uuid, p_inventory jsonb)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_inventory ->> 'hostname' IS DISTINCT FROM (SELECT n.name FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the inventory names another host',
            'A node reports its own inventory; a renamed host joins again with a new token.');
    END IF;
    RETURN compute.node_register((SELECT n.pool_id FROM compute.nodes AS n WHERE n.node_id = p_node_id), p_inventory ->> 'hostname', p_inventory);
END
$$;
COMMENT ON FUNCTION compute.node_inventory_reported(uuid, jsonb) IS 'A node''s verified inventory re-registers it (a GPU gone: present = false, bookings stay).';

CREATE FUNCTION compute.node_spec_observed(p_node_id uuid, p_generation bigint, p_conditions jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_conditions IS NULL OR pg_catalog.jsonb_typeof(p_conditions) <> 'array'
       OR pg_catalog.octet_length(p_conditions::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'conditions are a bounded JSON array', 'Send [] when all is well.');
    END IF;
    -- Observed only ever moves forward, and never past what was signed for the node.
    UPDATE compute.node_specs
       SET observed_generation = greatest(observed_generation, p_generation), observed_at = compute.compute_now(), conditions = p_conditions
     WHERE node_id = p_node_id AND p_generation <= signed_generation;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('generation %s was never sent to node %s', p_generation, p_node_id),
            'Report the generation of the spec you applied.');
    END IF;
    -- Entries with a gpu_uuid are that GPU's conditions (compute.device_conditions).
    PERFORM compute.device_conditions_reported(p_node_id, p_generation, p_conditions);
END
$$;
COMMENT ON FUNCTION compute.node_spec_observed(uuid, bigint, jsonb) IS 'A node applied a spec generation (verified report); its conditions, those of its GPUs per GPU.';

CREATE FUNCTION compute.node_command_result(p_node_id uuid, p_command_id uuid, p_status text, p_output text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('succeeded', 'failed', 'unsupported') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid command status %L', p_status),
            'Use succeeded, failed or unsupported.');
    END IF;
    -- The first result wins; a repeated one (at-least-once delivery) changes nothing.
    UPDATE compute.node_commands
       SET state = p_status, finished_at = compute.compute_now(),
           output = pg_catalog.left(p_output, compute.limit('command_output_bytes')::integer)
     WHERE command_id = p_command_id AND node_id = p_node_id AND state = 'pending';
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION compute.node_command_result(uuid, uuid, text, text) IS 'A command''s result (verified report; the first one counts; output bounded).';

CREATE FUNCTION compute.node_key_replace(p_node_id uuid, p_public_key bytea)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- Only from a verified node.key report: the old key signed the new one, which signed itself.
    IF p_public_key IS NULL OR octet_length(p_public_key) NOT BETWEEN 32 AND 1024 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a new key is the DER of a public key', 'Send the DER SubjectPublicKeyInfo, base64.');
    END IF;
    UPDATE compute.node_identities SET public_key = p_public_key WHERE node_id = p_node_id;
END
$$;
COMMENT ON FUNCTION compute.node_key_replace(uuid, bytea) IS 'The key a node signs with from now on (verified node.key report).';

-- -- the inbox: appended by gateways, decided by workers ---------------------------------------------

CREATE FUNCTION compute.node_report_reject(p_report_id bigint, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the report row (the caller may hold it already), then the outbox, then older
-- rejected reports of the node (deleted beyond node_reports_rejected_kept).
DECLARE
    v_report compute.node_reports;
BEGIN
    UPDATE compute.node_reports
       SET state = 'rejected', reason = pg_catalog.left(coalesce(p_reason, 'rejected'), 1000), decided_at = compute.compute_now()
     WHERE report_id = p_report_id AND state = 'pending'
    RETURNING * INTO v_report;
    IF NOT FOUND THEN
        RETURN;  -- decided already (a second worker run): nothing to record twice
    END IF;
    PERFORM compute.outbox_emit((SELECT s.tenant_id FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
                                  WHERE n.node_id = v_report.node_id),
        'node', v_report.node_id::text, 'node.report_rejected',
        pg_catalog.jsonb_build_object('node_id', v_report.node_id, 'report_id', v_report.report_id,
            'purpose', pg_catalog.left(v_report.envelope ->> 'purpose', 64), 'reason', v_report.reason));
    DELETE FROM compute.node_reports AS r
     WHERE r.node_id = v_report.node_id AND r.state = 'rejected'
       AND r.report_id < (SELECT k.report_id FROM compute.node_reports AS k
                           WHERE k.node_id = v_report.node_id AND k.state = 'rejected'
                           ORDER BY k.report_id DESC OFFSET compute.limit('node_reports_rejected_kept') - 1 LIMIT 1);
END
$$;
COMMENT ON FUNCTION compute.node_report_reject(bigint, text) IS 'Record a report as rejected (never applied) with the reason; event node.report_rejected.';

CREATE FUNCTION compute.node_report_apply(p_report_id bigint, p_public_key bytea)
RETURNS boolean
LANGUAGE plpgsql
AS $$
-- Lock order: the report row, the node's identity row (one verifier per node at a time), then what
-- the report's effect locks (node_register: the node and its devices; node_specs; node_commands).
DECLARE
    v_report   compute.node_reports;
    v_identity compute.node_identities;
    v_body     jsonb;
    v_epoch    bigint;
    v_seq      bigint;
    v_reason   text;
BEGIN
    SELECT * INTO v_report FROM compute.node_reports AS r WHERE r.report_id = p_report_id AND r.state = 'pending' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- decided already
    END IF;
    SELECT * INTO v_identity FROM compute.node_identities AS i WHERE i.node_id = v_report.node_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.node_report_reject(p_report_id, 'the node has no registered key (it never joined)');
        RETURN false;
    END IF;
    IF v_identity.public_key IS DISTINCT FROM p_public_key THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('the key of node %s is not the one the report was verified with', v_report.node_id),
            'Verify the report again with the key worker_api.node_reports_pending answers now.');
    END IF;
    IF EXISTS (SELECT 1 FROM compute.node_reports AS r WHERE r.node_id = v_report.node_id AND r.state = 'pending'
                  AND (r.epoch, r.report_id) < (v_report.epoch, v_report.report_id)) THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('an earlier report of node %s is still pending', v_report.node_id),
            'Decide the node''s reports in the order worker_api.node_reports_pending answers them.');
    END IF;
    v_body := v_report.envelope -> 'body';
    -- The body binds the node, the session it was sent under and its place in that session.
    IF v_body ->> 'node_id' IS DISTINCT FROM v_report.node_id::text THEN
        v_reason := 'the report names another node';
    ELSIF pg_catalog.jsonb_typeof(v_body -> 'epoch') IS DISTINCT FROM 'number' OR pg_catalog.jsonb_typeof(v_body -> 'seq') IS DISTINCT FROM 'number'
          OR (v_body ->> 'epoch') !~ '^[0-9]{1,18}$' OR (v_body ->> 'seq') !~ '^[0-9]{1,18}$' THEN
        v_reason := 'the report needs an integer epoch and seq';
    ELSE
        v_epoch := (v_body ->> 'epoch')::bigint;
        v_seq := (v_body ->> 'seq')::bigint;
        IF v_epoch <> v_report.epoch THEN
            v_reason := pg_catalog.format('the report was signed in session epoch %s and relayed in epoch %s', v_epoch, v_report.epoch);
        ELSIF (v_epoch, v_seq) <= (v_identity.report_epoch, v_identity.report_seq) THEN
            v_reason := pg_catalog.format('replayed or out of order: (epoch %s, seq %s) is not after (%s, %s), the last report applied',
                                          v_epoch, v_seq, v_identity.report_epoch, v_identity.report_seq);
        END IF;
    END IF;
    IF v_reason IS NULL THEN
        UPDATE compute.node_identities SET report_epoch = v_epoch, report_seq = v_seq WHERE node_id = v_report.node_id;
        BEGIN
            CASE v_report.envelope ->> 'purpose'
                WHEN 'node.inventory' THEN
                    PERFORM compute.node_inventory_reported(v_report.node_id, v_body -> 'inventory');
                WHEN 'node.observed' THEN
                    PERFORM compute.instances_observed(v_report.node_id, v_body -> 'instances');  -- sql/700_instances.sql
                    PERFORM compute.node_observed(v_report.node_id, v_body);
                WHEN 'node.result' THEN
                    PERFORM compute.node_command_result(v_report.node_id, compute.report_uuid(v_body, 'command_id'),
                                                        v_body ->> 'status', v_body ->> 'output');
                WHEN 'node.key' THEN
                    PERFORM compute.node_key_replace(v_report.node_id, compute.report_base64(v_body, 'public_key'));
                ELSE
                    PERFORM compute.raise_error('UNSUPPORTED', pg_catalog.format('no report of purpose %L', pg_catalog.left(v_report.envelope ->> 'purpose', 64)),
                        'A node reports node.inventory, node.observed, node.result or node.key.');
            END CASE;
        EXCEPTION WHEN OTHERS THEN
            -- A contract error (what the node said is invalid) rejects the report; any other error
            -- (a deadlock, the database restarting) fails the worker's run, which tries again.
            IF pg_catalog.left(SQLSTATE, 2) <> 'BC' THEN
                RAISE;
            END IF;
            v_reason := SQLERRM;
        END;
    END IF;
    IF v_reason IS NOT NULL THEN
        PERFORM compute.node_report_reject(p_report_id, v_reason);
        RETURN false;
    END IF;
    DELETE FROM compute.node_reports WHERE report_id = p_report_id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION compute.node_report_apply(bigint, bytea) IS 'A report whose signature a worker verified with the node''s key: applied in (epoch, seq) order, or rejected.';

CREATE FUNCTION compute.report_bigint(p_body jsonb, p_field text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF pg_catalog.jsonb_typeof(p_body -> p_field) IS DISTINCT FROM 'number' OR (p_body ->> p_field) !~ '^-?[0-9]{1,18}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the report''s %s is not an integer', p_field), 'Send an integer.');
    END IF;
    RETURN (p_body ->> p_field)::bigint;
END
$$;
COMMENT ON FUNCTION compute.report_bigint(jsonb, text) IS 'An integer field of a report body (INVALID_ARGUMENT otherwise).';

CREATE FUNCTION compute.report_uuid(p_body jsonb, p_field text)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF pg_catalog.jsonb_typeof(p_body -> p_field) IS DISTINCT FROM 'string'
       OR (p_body ->> p_field) !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the report''s %s is not a UUID', p_field), 'Send the id as the control plane gave it.');
    END IF;
    RETURN (p_body ->> p_field)::uuid;
END
$$;
COMMENT ON FUNCTION compute.report_uuid(jsonb, text) IS 'A UUID field of a report body (INVALID_ARGUMENT otherwise).';

CREATE FUNCTION compute.report_base64(p_body jsonb, p_field text)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF pg_catalog.jsonb_typeof(p_body -> p_field) IS DISTINCT FROM 'string' OR (p_body ->> p_field) !~ '^[A-Za-z0-9+/]+={0,2}$'
       OR pg_catalog.length(p_body ->> p_field) % 4 <> 0 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the report''s %s is not base64', p_field), 'Send standard base64 with padding.');
    END IF;
    RETURN pg_catalog.decode(p_body ->> p_field, 'base64');
END
$$;
COMMENT ON FUNCTION compute.report_base64(jsonb, text) IS 'A base64 field of a report body, decoded (INVALID_ARGUMENT otherwise).';

-- -- node_api (bc_gateway): append only --------------------------------------------------------------

CREATE FUNCTION node_api.report(p_node_id uuid, p_epoch bigint, p_envelope jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
DECLARE
    v_report_id bigint;
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    IF p_envelope IS NULL OR pg_catalog.jsonb_typeof(p_envelope) <> 'object'
       OR pg_catalog.octet_length(p_envelope::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a report is a signed envelope (a JSON object) within node_message_bytes',
            'Relay the node''s envelope as it came.');
    END IF;
    IF (SELECT count(*) FROM compute.node_reports AS r WHERE r.node_id = p_node_id AND r.state = 'pending')
       >= compute.limit('node_reports_pending_per_node') THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED', 'this node has as many reports waiting for a worker as it may',
            pg_catalog.format('Run a worker (serve worker); limit node_reports_pending_per_node = %s.', compute.limit('node_reports_pending_per_node')));
    END IF;
    INSERT INTO compute.node_reports (node_id, epoch, envelope, received_at)
    VALUES (p_node_id, p_epoch, p_envelope, compute.compute_now())
    RETURNING report_id INTO v_report_id;
    -- Acknowledgements and results go first (a reservation or a person waits for them; a burst of
    -- inventories after many nodes connect does not delay them); the node's reports stay in order.
    PERFORM compute.work_poke('node.reports', p_node_id::text, '{}', NULL,
                              CASE WHEN p_envelope ->> 'purpose' IN ('node.observed', 'node.result') THEN 1 ELSE 0 END);
    RETURN v_report_id;
END
$$;
COMMENT ON FUNCTION node_api.report(uuid, bigint, jsonb) IS 'Append a node''s signed report, as received, to its inbox (under its current session); a worker verifies and applies it.';

-- -- worker_api (bc_worker): verify, then apply or reject ---------------------------------------------

CREATE FUNCTION worker_api.node_reports_pending(p_node_id uuid, p_limit integer)
RETURNS TABLE (report_id bigint, envelope jsonb, public_key bytea)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'read 1 to 1000 reports at a time', 'Pass a batch size.');
    END IF;
    -- In the order they must be applied, with the key to verify them (the node's registered key;
    -- NULL for a node that never joined: its reports are rejected).
    RETURN QUERY
    SELECT r.report_id, r.envelope, i.public_key
      FROM compute.node_reports AS r LEFT JOIN compute.node_identities AS i ON i.node_id = r.node_id
     WHERE r.node_id = p_node_id AND r.state = 'pending'
     ORDER BY r.epoch, r.report_id
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION worker_api.node_reports_pending(uuid, integer) IS 'A node''s reports to verify, in order, with its registered public key.';

CREATE FUNCTION worker_api.node_report_verified(p_report_id bigint, p_public_key bytea)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_report_apply(p_report_id, p_public_key) $$;
COMMENT ON FUNCTION worker_api.node_report_verified(bigint, bytea) IS 'The worker verified the report with this key: apply it (true), or reject it as replayed or invalid (false).';

CREATE FUNCTION worker_api.node_report_rejected(p_report_id bigint, p_reason text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_report_reject(p_report_id, p_reason) $$;
COMMENT ON FUNCTION worker_api.node_report_rejected(bigint, text) IS 'The report''s signature does not verify: record it, never apply it.';

-- -- ops (bc_operator) --------------------------------------------------------------------------------

CREATE VIEW ops.node_reports_rejected AS
    SELECT r.node_id, n.name AS node, r.report_id, pg_catalog.left(r.envelope ->> 'purpose', 64) AS purpose, r.reason,
           r.received_at, r.decided_at
      FROM compute.node_reports AS r JOIN compute.nodes AS n ON n.node_id = r.node_id
     WHERE r.state = 'rejected';
COMMENT ON VIEW ops.node_reports_rejected IS 'Reports a gateway relayed that a worker rejected (bad signature, replayed, invalid): never applied.';

-- == Removed gateway writes ==========================================================================
-- The functions through which a gateway wrote a node's inventory, acknowledgement, command result and
-- key directly (before node_reports_verified_by_the_worker) stay defined, so that the released
-- changes' verify scripts still find them and a gateway of an older release is told plainly what to
-- do: each only answers UNSUPPORTED and changes nothing.

CREATE FUNCTION compute.node_api_removed(p_function text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM compute.raise_error('UNSUPPORTED',
        pg_catalog.format('node_api.%s no longer applies what a gateway says: a node''s reports are signed by the node and relayed with node_api.report', p_function),
        'Upgrade the gateway (better-compute serve gateway) to this release: it relays every node report with node_api.report, and a worker verifies the node''s signature before anything takes effect.');
END
$$;
COMMENT ON FUNCTION compute.node_api_removed(text) IS 'UNSUPPORTED for a node_api write a gateway may no longer make (P14): what to use instead.';

CREATE FUNCTION node_api.node_public_key(p_node_id uuid) RETURNS bytea
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.node_api_removed('node_public_key');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION node_api.node_public_key(uuid) IS 'Removed: UNSUPPORTED (the worker checks nodes'' signatures, not the gateway).';

CREATE FUNCTION node_api.inventory_report(p_node_id uuid, p_epoch bigint, p_inventory jsonb) RETURNS uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.node_api_removed('inventory_report');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION node_api.inventory_report(uuid, bigint, jsonb) IS 'Removed: UNSUPPORTED (node_api.report relays a node''s signed inventory).';

CREATE FUNCTION node_api.node_key_renewed(p_node_id uuid, p_epoch bigint, p_public_key bytea) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.node_api_removed('node_key_renewed');
END
$$;
COMMENT ON FUNCTION node_api.node_key_renewed(uuid, bigint, bytea) IS 'Removed: UNSUPPORTED (node_api.report relays a key change signed by the old and the new key).';

CREATE FUNCTION node_api.spec_observed(p_node_id uuid, p_epoch bigint, p_generation bigint, p_conditions jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.node_api_removed('spec_observed');
END
$$;
COMMENT ON FUNCTION node_api.spec_observed(uuid, bigint, bigint, jsonb) IS 'Removed: UNSUPPORTED (node_api.report relays a node''s signed acknowledgement).';

CREATE FUNCTION node_api.command_result(p_node_id uuid, p_epoch bigint, p_command_id uuid, p_status text, p_output text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.node_api_removed('command_result');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION node_api.command_result(uuid, bigint, uuid, text, text) IS 'Removed: UNSUPPORTED (node_api.report relays a node''s signed command result).';
