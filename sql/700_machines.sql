-- Bare metal (issue 14, docs/architecture.md §12): machines provisioned through their BMCs by a site agent.
--
--   site_agents       one process per site network (better-compute serve site-agent); its X25519
--                     public key is what BMC credentials are sealed to (P14)
--   machines          a server known by its BMC: provision state, deadline, failure count, last
--                     error, BmcReachable (a condition: changes nothing else, P6)
--   machine_states    the states, which of them are failures (= quarantined) and their deadline
--   machine_transitions  the legal moves as rows: (from, event) -> to; any other move is refused
--   machine_credentials  BMC credentials, versioned, only as boxes sealed to the agent's key with
--                     the machine id as associated data: nobody but the agent can open them
--   bmc_ops           BMC operations as rows (kind, args, epoch); a partial unique index keeps one
--                     live operation per machine; a result with a stale epoch is FENCED. The worker
--                     signs each (P14: purpose bmc.op, its intent key) before an agent may claim it;
--                     the agent runs only what the signature covers (address, kind, args)
--
-- The reconciler (compute.machine_reconcile, worker work 'machines.reconcile' and the periodic
-- 'machines.sweep') is level-triggered: from the state, the step within the state's plan and the
-- live operation it decides the next operation; it never waits on a BMC. Failures move the machine
-- to verify_failed / deploy_failed / clean_failed (quarantined); only an operator's retry or abort
-- leaves them. A machine is never declared lost (P6).
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_site_agent') THEN
        CREATE ROLE bc_site_agent NOLOGIN;
    END IF;
END
$roles$;
CREATE SCHEMA site_api AUTHORIZATION bc_owner;
COMMENT ON SCHEMA site_api IS 'What site agents call (bc_site_agent): claim BMC operations, return their results.';
GRANT USAGE ON SCHEMA site_api TO bc_site_agent;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA site_api GRANT EXECUTE ON FUNCTIONS TO bc_site_agent;

SET LOCAL ROLE bc_owner;


INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('machine_verify_seconds',        900, 'seconds', 'How long a machine may stay in verifying (BMC reachable) before verify_failed.'),
    ('machine_deploy_seconds',       1800, 'seconds', 'How long a machine may stay in deploying (BMC reachable) before deploy_failed.'),
    ('machine_deploy_wait_seconds',  1800, 'seconds', 'How long a deployed machine may take to join (deploy_wait) before deploy_failed.'),
    ('machine_clean_seconds',        1800, 'seconds', 'How long a machine may stay in cleaning (BMC reachable) before clean_failed.'),
    ('machine_failures',                5, 'count',   'Failed BMC operations of one machine in one state before it is quarantined.'),
    ('machines_provisioning_per_agent', 8, 'count',   'Machines one site agent deploys at once (more wait for a slot).'),
    ('bmc_sessions_per_agent',          4, 'count',   'BMC operations one site agent runs at once.'),
    ('bmc_op_seconds',                300, 'seconds', 'How long a claimed BMC operation may run before it is taken back and issued again under a new epoch.'),
    ('bmc_unreachable_retry_seconds',  30, 'seconds', 'How long the reconciler waits before trying a BMC that did not answer again.');

CREATE TABLE compute.site_agents (
    agent_id      uuid CONSTRAINT site_agents_pkey PRIMARY KEY,
    site_id       uuid NOT NULL CONSTRAINT site_agents_site_id_fkey REFERENCES compute.sites,
    name          text NOT NULL CONSTRAINT site_agents_name_check CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    public_key    bytea NOT NULL CONSTRAINT site_agents_public_key_check CHECK (octet_length(public_key) = 32),
    key_id        text NOT NULL CONSTRAINT site_agents_key_id_check CHECK (key_id ~ '^[0-9a-f]{16}$'),
    created_at    timestamptz NOT NULL,
    last_heard_at timestamptz,
    signing_key   bytea CONSTRAINT site_agents_signing_key_check CHECK (octet_length(signing_key) = 32),
    CONSTRAINT site_agents_site_id_name_key UNIQUE (site_id, name),
    CONSTRAINT site_agents_key_id_is_the_key_digest CHECK (key_id = left(pg_catalog.encode(pg_catalog.sha256(public_key), 'hex'), 16))
);
COMMENT ON TABLE compute.site_agents IS 'Site agents: the X25519 public key BMC credentials are sealed to (only the agent holds the private key).';
COMMENT ON COLUMN compute.site_agents.signing_key IS 'The agent''s Ed25519 public key (raw, 32 bytes): a worker applies a BMC result only when it verifies with it (P14); none: no result of the agent is applied.';

CREATE TABLE compute.machine_states (
    state         text CONSTRAINT machine_states_pkey PRIMARY KEY,
    failed        boolean NOT NULL,
    deadline_limit text CONSTRAINT machine_states_deadline_limit_fkey REFERENCES compute.limits (name),
    description   text NOT NULL
);
COMMENT ON TABLE compute.machine_states IS 'Provision states; failed ones are quarantined; deadline_limit names the limit that bounds the stay.';

INSERT INTO compute.machine_states (state, failed, deadline_limit, description) VALUES
    ('enrolled',      false, NULL,                          'Known by its BMC; nothing checked yet.'),
    ('verifying',     false, 'machine_verify_seconds',      'The site agent checks the BMC answers with these credentials and the system is the one enrolled.'),
    ('manageable',    false, NULL,                          'Verified; waits for an operator to provide it.'),
    ('deploying',     false, 'machine_deploy_seconds',      'Power off, old media out, the image in, boot from CD, power on.'),
    ('deploy_wait',   false, 'machine_deploy_wait_seconds', 'Booted; waits for its bcd to join with the machine''s single-use token.'),
    ('active',        false, NULL,                          'Its node is in the fleet (bookable; a bare_metal reservation books all of it).'),
    ('cleaning',      false, 'machine_clean_seconds',       'Released: the old node identity is revoked; power off, media out, boot device reset.'),
    ('available',     false, NULL,                          'Clean; deployed again at once, to rejoin with a new key.'),
    ('verify_failed', true,  NULL,                          'Quarantined: verification failed; operator: retry or abort.'),
    ('deploy_failed', true,  NULL,                          'Quarantined: deployment failed; operator: retry or abort.'),
    ('clean_failed',  true,  NULL,                          'Quarantined: cleaning failed (never rejoins with its old identity); operator: retry or abort.');

CREATE TABLE compute.machine_transitions (
    from_state text NOT NULL CONSTRAINT machine_transitions_from_state_fkey REFERENCES compute.machine_states,
    event      text NOT NULL CONSTRAINT machine_transitions_event_check CHECK (event IN ('manage', 'verified', 'provide', 'deployed', 'joined', 'release', 'cleaned',
                                                'fail', 'retry', 'abort')),
    to_state   text NOT NULL CONSTRAINT machine_transitions_to_state_fkey REFERENCES compute.machine_states,
    by_operator boolean NOT NULL,
    CONSTRAINT machine_transitions_pkey PRIMARY KEY (from_state, event)
);
COMMENT ON TABLE compute.machine_transitions IS 'The legal moves of a machine; compute.machine_transition refuses every other.';

INSERT INTO compute.machine_transitions (from_state, event, to_state, by_operator) VALUES
    ('enrolled',      'manage',   'verifying',     true),
    ('verifying',     'verified', 'manageable',    false),
    ('verifying',     'fail',     'verify_failed', false),
    ('verifying',     'abort',    'verify_failed', true),
    ('manageable',    'manage',   'verifying',     true),
    ('manageable',    'provide',  'deploying',     true),
    ('deploying',     'deployed', 'deploy_wait',   false),
    ('deploying',     'fail',     'deploy_failed', false),
    ('deploying',     'abort',    'deploy_failed', true),
    ('deploy_wait',   'joined',   'active',        false),
    ('deploy_wait',   'fail',     'deploy_failed', false),
    ('deploy_wait',   'abort',    'deploy_failed', true),
    ('active',        'release',  'cleaning',      true),
    ('cleaning',      'cleaned',  'available',     false),
    ('cleaning',      'fail',     'clean_failed',  false),
    ('cleaning',      'abort',    'clean_failed',  true),
    ('available',     'provide',  'deploying',     false),
    ('verify_failed', 'retry',    'verifying',     true),
    ('verify_failed', 'abort',    'enrolled',      true),
    ('deploy_failed', 'retry',    'deploying',     true),
    ('deploy_failed', 'abort',    'manageable',    true),
    ('clean_failed',  'retry',    'cleaning',      true),
    ('clean_failed',  'abort',    'manageable',    true);

CREATE TABLE compute.machines (
    machine_id          uuid CONSTRAINT machines_pkey PRIMARY KEY,
    site_id             uuid NOT NULL CONSTRAINT machines_site_id_fkey REFERENCES compute.sites,
    pool_id             uuid NOT NULL CONSTRAINT machines_pool_id_fkey REFERENCES compute.pools,
    agent_id            uuid NOT NULL CONSTRAINT machines_agent_id_fkey REFERENCES compute.site_agents,
    name                text NOT NULL CONSTRAINT machines_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    bmc_address         text NOT NULL CONSTRAINT machines_bmc_address_check CHECK (bmc_address ~ '^https?://[^\s/]+(/\S*)?$' AND length(bmc_address) <= 500),
    system_uuid         text NOT NULL CONSTRAINT machines_system_uuid_check CHECK (system_uuid ~ '^[0-9A-Fa-f-]{32,36}$'),
    serial              text CONSTRAINT machines_serial_check CHECK (length(serial) <= 200),
    image_url           text NOT NULL CONSTRAINT machines_image_url_check CHECK (image_url ~ '^https?://\S+$' AND length(image_url) <= 2000),
    state               text NOT NULL CONSTRAINT machines_state_fkey REFERENCES compute.machine_states,
    state_since         timestamptz NOT NULL,
    step                integer NOT NULL DEFAULT 0 CONSTRAINT machines_step_check CHECK (step >= 0),
    generation          bigint NOT NULL DEFAULT 1,
    observed_generation bigint NOT NULL DEFAULT 0,
    op_epoch            bigint NOT NULL DEFAULT 0,
    failure_count       integer NOT NULL DEFAULT 0 CONSTRAINT machines_failure_count_check CHECK (failure_count >= 0),
    deadline            timestamptz,
    last_error          text CONSTRAINT machines_last_error_check CHECK (length(last_error) <= 2000),
    bmc_reachable       boolean,
    bmc_unreachable_since timestamptz,
    credentials_tried   integer,
    credentials_worked  integer,
    node_id             uuid CONSTRAINT machines_node_id_fkey REFERENCES compute.nodes,
    created_at          timestamptz NOT NULL,
    CONSTRAINT machines_site_id_name_key UNIQUE (site_id, name),
    CONSTRAINT machines_system_uuid_key UNIQUE (system_uuid),
    CONSTRAINT machines_node_id_key UNIQUE (node_id),
    CONSTRAINT machines_unreachable_has_since CHECK ((bmc_reachable IS FALSE) = (bmc_unreachable_since IS NOT NULL))
);
COMMENT ON TABLE compute.machines IS 'Bare-metal machines: provision state (legal moves in machine_transitions), step in the state''s plan, op epoch (fencing), deadline, BmcReachable.';
COMMENT ON COLUMN compute.machines.generation IS 'Bumped by every state change; observed_generation: the generation whose plan finished.';

CREATE TABLE compute.machine_credentials (
    machine_id uuid NOT NULL CONSTRAINT machine_credentials_machine_id_fkey REFERENCES compute.machines ON DELETE CASCADE,
    version    integer NOT NULL CONSTRAINT machine_credentials_version_check CHECK (version > 0),
    key_id     text NOT NULL CONSTRAINT machine_credentials_key_id_check CHECK (key_id ~ '^[0-9a-f]{16}$'),
    box        bytea NOT NULL CONSTRAINT machine_credentials_box_check CHECK (octet_length(box) BETWEEN 49 AND 4096),
    created_at timestamptz NOT NULL,
    CONSTRAINT machine_credentials_pkey PRIMARY KEY (machine_id, version)
);
COMMENT ON TABLE compute.machine_credentials IS 'BMC credentials, versioned, only sealed to the site agent''s key (machine id as associated data); nothing here can open them.';

CREATE TABLE compute.machine_join_tokens (
    token_id    uuid CONSTRAINT machine_join_tokens_pkey PRIMARY KEY CONSTRAINT machine_join_tokens_token_id_fkey REFERENCES compute.join_tokens,
    machine_id  uuid NOT NULL CONSTRAINT machine_join_tokens_machine_id_fkey REFERENCES compute.machines ON DELETE CASCADE,
    system_uuid text NOT NULL
);
COMMENT ON TABLE compute.machine_join_tokens IS 'Join tokens bound to one machine: the joining inventory must carry its system_uuid.';

CREATE TABLE compute.bmc_ops (
    op_id       bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT bmc_ops_pkey PRIMARY KEY,
    machine_id  uuid NOT NULL CONSTRAINT bmc_ops_machine_id_fkey REFERENCES compute.machines ON DELETE CASCADE,
    agent_id    uuid NOT NULL CONSTRAINT bmc_ops_agent_id_fkey REFERENCES compute.site_agents,
    epoch       bigint NOT NULL CONSTRAINT bmc_ops_epoch_check CHECK (epoch > 0),
    state_name  text NOT NULL,
    generation  bigint NOT NULL,
    step        integer NOT NULL,
    kind        text NOT NULL CONSTRAINT bmc_ops_kind_check CHECK (kind IN ('verify', 'power_off', 'power_on', 'boot_device', 'vmedia_insert', 'vmedia_eject')),
    args        jsonb NOT NULL DEFAULT '{}',
    envelope    jsonb,
    state       text NOT NULL CONSTRAINT bmc_ops_state_check CHECK (state IN ('unsigned', 'queued', 'running', 'succeeded', 'failed', 'unreachable', 'expired', 'cancelled')),
    created_at  timestamptz NOT NULL,
    claimed_at  timestamptz,
    deadline    timestamptz,
    finished_at timestamptz,
    result      jsonb,
    error       text CONSTRAINT bmc_ops_error_check CHECK (length(error) <= 2000),
    result_envelope jsonb,
    result_rejected text CONSTRAINT bmc_ops_result_rejected_check CHECK (length(result_rejected) <= 2000),
    CONSTRAINT bmc_ops_signed_unless_unsigned CHECK ((state = 'unsigned') = (envelope IS NULL))
);
CREATE UNIQUE INDEX bmc_ops_one_live ON compute.bmc_ops (machine_id) WHERE state IN ('unsigned', 'queued', 'running');
CREATE INDEX bmc_ops_agent_live ON compute.bmc_ops (agent_id, op_id) WHERE state IN ('queued', 'running');
CREATE INDEX bmc_ops_machine ON compute.bmc_ops (machine_id, op_id);
COMMENT ON TABLE compute.bmc_ops IS 'BMC operations: at most one live (unsigned, queued or running) per machine; signed by a worker before an agent claims it; results are accepted only with the op''s epoch.';
COMMENT ON COLUMN compute.bmc_ops.result_envelope IS 'The result of a running op as relayed (purpose bmc.result, signed by the agent), until a worker verified it with the agent''s signing key and applied it, or rejected it.';
COMMENT ON COLUMN compute.bmc_ops.result_rejected IS 'Why a worker rejected the last result relayed for this op (its signature did not verify, ...): never applied.';

INSERT INTO compute.work_periodic (kind, every) VALUES ('machines.sweep', interval '5 seconds');

-- The plan of each operation-driven state: the operations in order (step 0, 1, ...).
CREATE FUNCTION compute.machine_plan(p_machine compute.machines)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT CASE p_machine.state
        WHEN 'verifying' THEN pg_catalog.jsonb_build_array(
            pg_catalog.jsonb_build_object('kind', 'verify', 'args', pg_catalog.jsonb_build_object('system_uuid', p_machine.system_uuid)))
        WHEN 'deploying' THEN pg_catalog.jsonb_build_array(
            pg_catalog.jsonb_build_object('kind', 'power_off', 'args', '{}'::jsonb),
            pg_catalog.jsonb_build_object('kind', 'vmedia_eject', 'args', '{}'::jsonb),
            pg_catalog.jsonb_build_object('kind', 'vmedia_insert', 'args', pg_catalog.jsonb_build_object(
                'image_url', p_machine.image_url, 'join_token', true, 'system_uuid', p_machine.system_uuid)),
            pg_catalog.jsonb_build_object('kind', 'boot_device', 'args', pg_catalog.jsonb_build_object('target', 'cd')),
            pg_catalog.jsonb_build_object('kind', 'power_on', 'args', '{}'::jsonb))
        WHEN 'cleaning' THEN pg_catalog.jsonb_build_array(
            pg_catalog.jsonb_build_object('kind', 'power_off', 'args', '{}'::jsonb),
            pg_catalog.jsonb_build_object('kind', 'vmedia_eject', 'args', '{}'::jsonb),
            pg_catalog.jsonb_build_object('kind', 'boot_device', 'args', pg_catalog.jsonb_build_object('target', 'hdd')))
        ELSE '[]'::jsonb END
$$;
COMMENT ON FUNCTION compute.machine_plan(compute.machines) IS 'The BMC operations a state runs, in order; the machine''s step says how many are done.';

CREATE FUNCTION compute.machine_get(p_machine text, p_lock boolean DEFAULT false)
RETURNS compute.machines
LANGUAGE plpgsql
AS $$
DECLARE
    v_machine compute.machines;
BEGIN
    IF p_machine ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
        SELECT * INTO v_machine FROM compute.machines AS m WHERE m.machine_id = p_machine::uuid;
    ELSE
        SELECT * INTO v_machine FROM compute.machines AS m WHERE m.name = p_machine ORDER BY m.created_at LIMIT 1;
    END IF;
    IF v_machine.machine_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no machine %s', p_machine), 'List the machines in ops.machines.');
    END IF;
    IF p_lock THEN
        SELECT * INTO v_machine FROM compute.machines AS m WHERE m.machine_id = v_machine.machine_id FOR UPDATE;
    END IF;
    RETURN v_machine;
END
$$;
COMMENT ON FUNCTION compute.machine_get(text, boolean) IS 'A machine by id or name (locked when asked), or NOT_FOUND.';

CREATE FUNCTION compute.machine_transition(p_machine_id uuid, p_event text, p_reason text DEFAULT NULL, p_operator boolean DEFAULT false)
RETURNS compute.machines
LANGUAGE plpgsql
AS $$
-- Lock order: the machine row, then its live BMC operation, then its node's flags.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_machine compute.machines;
    v_move    compute.machine_transitions;
    v_limit   text;
BEGIN
    SELECT * INTO v_machine FROM compute.machines AS m WHERE m.machine_id = p_machine_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no machine %s', p_machine_id), 'List the machines in ops.machines.');
    END IF;
    SELECT * INTO v_move FROM compute.machine_transitions AS t WHERE t.from_state = v_machine.state AND t.event = p_event;
    IF NOT FOUND OR v_move.by_operator <> p_operator THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('machine %s is %s: %s is not a legal move from there', v_machine.name, v_machine.state, p_event),
            coalesce((SELECT 'From ' || v_machine.state || ' an operator may: ' || pg_catalog.string_agg(t.event, ', ' ORDER BY t.event)
                        FROM compute.machine_transitions AS t WHERE t.from_state = v_machine.state AND t.by_operator),
                     'From ' || v_machine.state || ' only the reconciler moves the machine; wait, or abort if it is in flight.'));
    END IF;
    -- Whatever was in flight is over: cancel it and bump the epoch so that a late result is FENCED.
    UPDATE compute.bmc_ops SET state = 'cancelled', finished_at = v_now
     WHERE machine_id = p_machine_id AND state IN ('unsigned', 'queued', 'running');
    SELECT s.deadline_limit INTO v_limit FROM compute.machine_states AS s WHERE s.state = v_move.to_state;
    UPDATE compute.machines
       SET state = v_move.to_state, state_since = v_now, step = 0, generation = generation + 1, op_epoch = op_epoch + 1,
           failure_count = CASE WHEN v_move.to_state = v_machine.state OR p_event IN ('fail', 'abort') THEN failure_count ELSE 0 END,
           deadline = CASE WHEN v_limit IS NULL OR v_move.to_state = 'deploying' THEN NULL
                           ELSE v_now + compute.limit(v_limit) * interval '1 second' END,
           last_error = CASE WHEN p_event IN ('fail', 'abort') THEN coalesce(p_reason, last_error)
                             WHEN p_event = 'retry' THEN last_error ELSE NULL END
     WHERE machine_id = p_machine_id
    RETURNING * INTO v_machine;
    -- Its node: quarantined with the machine; cordoned and its key revoked while it is cleaned (the
    -- old identity never comes back: a rejoin registers a new key); cleared when it joins again.
    IF v_machine.node_id IS NOT NULL THEN
        IF (SELECT s.failed FROM compute.machine_states AS s WHERE s.state = v_machine.state) THEN
            PERFORM compute.node_flag_set(v_machine.node_id, 'quarantined', 'machine',
                pg_catalog.format('machine %s is %s: %s', v_machine.name, v_machine.state, coalesce(v_machine.last_error, p_event)));
        ELSIF v_machine.state = 'cleaning' THEN
            PERFORM compute.node_flag_set(v_machine.node_id, 'cordoned', 'machine', pg_catalog.format('machine %s is being cleaned', v_machine.name));
            DELETE FROM compute.node_identities WHERE node_id = v_machine.node_id;
            UPDATE compute.node_sessions SET closed_at = v_now WHERE node_id = v_machine.node_id AND closed_at IS NULL;
        ELSIF v_machine.state = 'active' THEN
            PERFORM compute.node_flag_clear(v_machine.node_id, 'cordoned');
            PERFORM compute.node_flag_clear(v_machine.node_id, 'quarantined');
        END IF;
    END IF;
    PERFORM compute.work_poke('machines.reconcile', p_machine_id::text);
    RETURN v_machine;
END
$$;
COMMENT ON FUNCTION compute.machine_transition(uuid, text, text, boolean) IS
    'Move a machine by one legal move of machine_transitions (INVALID_ARGUMENT otherwise); cancels its live operation.';

-- Events: one per state change, through the outbox (never a credential: they are in another table).
CREATE FUNCTION compute.outbox_machine_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.outbox_emit((SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = NEW.site_id), 'machine', NEW.machine_id::text,
        CASE WHEN TG_OP = 'INSERT' THEN 'machine.enrolled'
             WHEN NEW.state IS DISTINCT FROM OLD.state THEN 'machine.state_changed'
             ELSE 'machine.bmc_reachable' END,
        pg_catalog.jsonb_build_object('machine_id', NEW.machine_id, 'name', NEW.name, 'state', NEW.state,
            'from', CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, 'generation', NEW.generation,
            'node_id', NEW.node_id, 'bmc_reachable', NEW.bmc_reachable, 'last_error', NEW.last_error));
    RETURN NULL;
END
$$;
CREATE TRIGGER machines_outbox_insert AFTER INSERT ON compute.machines
    FOR EACH ROW EXECUTE FUNCTION compute.outbox_machine_changed();
CREATE TRIGGER machines_outbox_update AFTER UPDATE OF state, bmc_reachable ON compute.machines
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.bmc_reachable IS DISTINCT FROM NEW.bmc_reachable)
    EXECUTE FUNCTION compute.outbox_machine_changed();

-- Bare-metal reservations: shape bare_metal books every atom of whole machines' nodes (the tenant
-- holds the machine); when such a reservation ends, the machine is cleaned (cleaning -> available ->
-- deployed again, a rejoin with a new key) before anyone else gets it.
CREATE INDEX reservations_bare_metal_ended ON compute.reservations (upper(during))
    WHERE instance_kind = 'bare_metal' AND state IN ('active', 'released', 'expired');

CREATE FUNCTION compute.machine_atoms_free(p_node_id uuid, p_during tstzrange)
RETURNS uuid[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Every atom of the node during the window, when each is schedulable for all of it (no layout
    -- change within it, no flag on the node, present GPUs without a critical condition) and free;
    -- NULL otherwise.
    RETURN (SELECT CASE WHEN count(*) > 0 AND bool_and(compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during))
                        THEN pg_catalog.array_agg(a.atom_id ORDER BY a.device_index, a.slices, a.slot) END
              FROM compute.atoms AS a
             WHERE a.node_id = p_node_id AND a.valid && p_during);
END
$$;
COMMENT ON FUNCTION compute.machine_atoms_free(uuid, tstzrange) IS 'All the atoms of a node during a window when every one is schedulable and free for all of it; else NULL.';

CREATE FUNCTION compute.place_machines(p_pool_id uuid, p_count integer, p_during tstzrange)
RETURNS uuid[]
LANGUAGE plpgsql
AS $$
-- Lock order: machine rows (FOR SHARE SKIP LOCKED, node rank order), then each one's devices (FOR
-- UPDATE SKIP LOCKED, device_id order): never waits, so it cannot deadlock with placements, nor with
-- a machine's transition (machine row, then its node's flags) or the layout and flag lockers.
DECLARE
    v_machine compute.machines;
    v_atoms   uuid[] := '{}';
    v_node    uuid[];
    v_devices uuid[];
    v_locked  integer;
    v_taken   integer := 0;
BEGIN
    FOR v_machine IN
        SELECT m.* FROM compute.machines AS m JOIN compute.nodes AS n ON n.node_id = m.node_id
         WHERE m.pool_id = p_pool_id AND m.state = 'active'
         ORDER BY n.rank
           FOR SHARE OF m SKIP LOCKED
    LOOP
        CONTINUE WHEN compute.machine_atoms_free(v_machine.node_id, p_during) IS NULL;
        SELECT pg_catalog.array_agg(d.device_id) INTO v_devices FROM compute.devices AS d WHERE d.node_id = v_machine.node_id;
        SELECT count(*) INTO v_locked
          FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                 ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;
        CONTINUE WHEN v_locked < pg_catalog.cardinality(v_devices);
        v_node := compute.machine_atoms_free(v_machine.node_id, p_during);  -- again, under the device locks
        CONTINUE WHEN v_node IS NULL;
        v_atoms := v_atoms || v_node;
        v_taken := v_taken + 1;
        EXIT WHEN v_taken = p_count;
    END LOOP;
    IF v_taken < p_count THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('cannot place %s whole machines in pool %s during %s', p_count, p_pool_id, p_during),
            (SELECT pg_catalog.format('%s of the pool''s machines are active (in the fleet); %s of them are wholly free for the window. '
                                      'A machine is booked whole: every GPU of it free for all of the window.',
                                      count(*) FILTER (WHERE m.state = 'active'),
                                      count(*) FILTER (WHERE m.state = 'active' AND compute.machine_atoms_free(m.node_id, p_during) IS NOT NULL))
               FROM compute.machines AS m WHERE m.pool_id = p_pool_id));
    END IF;
    RETURN v_atoms;
END
$$;
COMMENT ON FUNCTION compute.place_machines(uuid, integer, tstzrange) IS
    'Placement of shape bare_metal: every atom of p_count active machines wholly free for the window (CAPACITY_CONFLICT otherwise).';

CREATE FUNCTION compute.machine_reservation_ended(p_machine compute.machines)
RETURNS uuid
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- A bare_metal reservation that held the machine's node and ended (released, expired or its
    -- window over) after the machine became active; NULL when none did.
    RETURN (SELECT r.reservation_id FROM compute.reservations AS r
             WHERE r.instance_kind = 'bare_metal' AND r.state IN ('active', 'released', 'expired')
               AND upper(r.during) <= compute.compute_now() AND upper(r.during) > p_machine.state_since
               AND EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.reservation_id = r.reservation_id AND b.node_id = p_machine.node_id AND b.state IN ('held', 'released'))
             ORDER BY upper(r.during) LIMIT 1);
END
$$;
COMMENT ON FUNCTION compute.machine_reservation_ended(compute.machines) IS 'A bare_metal reservation of the machine that ended since it became active (it is to be cleaned), or NULL.';

CREATE FUNCTION compute.machine_reservation_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- Released or expired now: the reconciler of its machines cleans them (a window that simply
    -- runs out changes no row: machines_sweep finds those).
    PERFORM compute.work_poke('machines.reconcile', m.machine_id::text)
       FROM compute.machines AS m
      WHERE m.node_id IN (SELECT b.node_id FROM compute.bookings AS b WHERE b.reservation_id = NEW.reservation_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER reservations_bare_metal_ended AFTER UPDATE OF state ON compute.reservations
    FOR EACH ROW WHEN (NEW.instance_kind = 'bare_metal' AND OLD.state = 'active' AND NEW.state IN ('released', 'expired'))
    EXECUTE FUNCTION compute.machine_reservation_changed();

CREATE FUNCTION compute.machine_issue(p_machine compute.machines, p_kind text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql
AS $$
-- The caller holds the machine row. The partial unique index refuses a second live op.
DECLARE
    v_op_id bigint;
BEGIN
    UPDATE compute.machines SET op_epoch = op_epoch + 1 WHERE machine_id = p_machine.machine_id;
    INSERT INTO compute.bmc_ops (machine_id, agent_id, epoch, state_name, generation, step, kind, args, state, created_at)
    VALUES (p_machine.machine_id, p_machine.agent_id, p_machine.op_epoch + 1, p_machine.state, p_machine.generation, p_machine.step, p_kind, p_args,
            'unsigned', compute.compute_now())
    RETURNING op_id INTO v_op_id;
    PERFORM compute.work_poke('bmc_ops.sign', v_op_id::text, '{}', NULL, 1);  -- the worker signs it (P14)
    RETURN v_op_id;
END
$$;
COMMENT ON FUNCTION compute.machine_issue(compute.machines, text, jsonb) IS 'Issue the machine''s next BMC operation under a new epoch (one live per machine), for a worker to sign.';

CREATE FUNCTION compute.bmc_op_to_sign(p_op_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('op_id', o.op_id, 'epoch', o.epoch, 'machine_id', o.machine_id, 'agent_id', o.agent_id,
               'kind', o.kind, 'args', o.args, 'bmc_address', m.bmc_address)
      FROM compute.bmc_ops AS o JOIN compute.machines AS m ON m.machine_id = o.machine_id
     WHERE o.op_id = p_op_id AND o.state = 'unsigned'
$$;
COMMENT ON FUNCTION compute.bmc_op_to_sign(bigint) IS 'What a worker signs of an unsigned op (purpose bmc.op): the op, its epoch, the BMC address, kind, args; NULL once signed or over.';

CREATE FUNCTION compute.bmc_op_signed(p_op_id bigint, p_envelope jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_agent_id uuid;
BEGIN
    IF p_envelope IS NULL OR p_envelope -> 'body' IS DISTINCT FROM compute.bmc_op_to_sign(p_op_id) THEN
        RETURN false;  -- signed, cancelled or changed meanwhile: the signature is dropped (the live op is signed again)
    END IF;
    UPDATE compute.bmc_ops SET state = 'queued', envelope = p_envelope WHERE op_id = p_op_id AND state = 'unsigned'
    RETURNING agent_id INTO v_agent_id;
    PERFORM pg_catalog.pg_notify('bc_bmc_ops', v_agent_id::text);
    RETURN true;
END
$$;
COMMENT ON FUNCTION compute.bmc_op_signed(bigint, jsonb) IS 'Store the signed envelope of an unsigned op (its body must be what bmc_op_to_sign answers); the op is claimable.';

CREATE FUNCTION compute.machine_reconcile(p_machine_id uuid)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Level-triggered: looks at the machine as it is now and does the one next thing; never waits on a
-- BMC. Lock order: the machine row, then its BMC operations.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_machine compute.machines;
    v_op      compute.bmc_ops;
    v_plan    jsonb;
    v_busy    bigint;
    v_ended   uuid;
BEGIN
    SELECT * INTO v_machine FROM compute.machines AS m WHERE m.machine_id = p_machine_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'gone';
    END IF;
    IF v_machine.state = 'available' THEN  -- clean: deploy again at once, to rejoin with a new key
        PERFORM compute.machine_transition(p_machine_id, 'provide');
        RETURN 'provided';
    END IF;
    IF v_machine.state = 'active' THEN
        -- A tenant's bare_metal reservation of it ended (released, lease expired, window over) since
        -- it became active: clean it before anyone else gets it. The same move as an operator's release.
        v_ended := compute.machine_reservation_ended(v_machine);
        IF v_ended IS NOT NULL THEN
            PERFORM compute.machine_transition(p_machine_id, 'release', NULL, true);
            RETURN 'released';
        END IF;
        RETURN 'idle';
    END IF;
    -- A deadline fires only while the BMC answers: a BMC that stopped answering changes BmcReachable, nothing else.
    IF v_machine.deadline IS NOT NULL AND v_machine.deadline <= v_now AND v_machine.bmc_reachable IS NOT FALSE THEN
        PERFORM compute.machine_transition(p_machine_id, 'fail',
            pg_catalog.format('%s did not finish by its deadline %s (step %s)', v_machine.state, v_machine.deadline, v_machine.step));
        RETURN 'deadline';
    END IF;
    SELECT * INTO v_op FROM compute.bmc_ops AS o WHERE o.machine_id = p_machine_id AND o.state IN ('unsigned', 'queued', 'running');
    IF FOUND THEN
        IF v_op.state = 'running' AND v_op.deadline <= v_now THEN
            -- Its agent went quiet: take it back; the same step is issued again under a new epoch,
            -- so a late result of the old one is FENCED. Operations are idempotent (target states).
            UPDATE compute.bmc_ops SET state = 'expired', finished_at = v_now, error = 'the site agent did not answer in time'
             WHERE op_id = v_op.op_id;
        ELSE
            RETURN 'waiting';
        END IF;
    END IF;
    v_plan := compute.machine_plan(v_machine);
    IF pg_catalog.jsonb_array_length(v_plan) = 0 THEN
        RETURN 'idle';
    END IF;
    IF v_machine.step >= pg_catalog.jsonb_array_length(v_plan) THEN
        UPDATE compute.machines SET observed_generation = generation WHERE machine_id = p_machine_id;
        PERFORM compute.machine_transition(p_machine_id,
            CASE v_machine.state WHEN 'verifying' THEN 'verified' WHEN 'deploying' THEN 'deployed' ELSE 'cleaned' END);
        RETURN 'done';
    END IF;
    IF v_machine.bmc_reachable IS FALSE
       AND v_machine.bmc_unreachable_since > v_now - compute.limit('bmc_unreachable_retry_seconds') * interval '1 second'
       AND EXISTS (SELECT 1 FROM compute.bmc_ops AS o WHERE o.machine_id = p_machine_id AND o.state = 'unreachable'
                      AND o.finished_at > v_now - compute.limit('bmc_unreachable_retry_seconds') * interval '1 second') THEN
        RETURN 'unreachable';
    END IF;
    IF v_machine.state = 'deploying' AND v_machine.step = 0 AND v_machine.deadline IS NULL THEN
        -- At most machines_provisioning_per_agent machines of one agent deploy at once.
        SELECT count(*) INTO v_busy FROM compute.machines AS m
         WHERE m.agent_id = v_machine.agent_id AND m.machine_id <> p_machine_id
           AND ((m.state = 'deploying' AND m.deadline IS NOT NULL) OR m.state = 'deploy_wait');
        IF v_busy >= compute.limit('machines_provisioning_per_agent') THEN
            RETURN 'queued for a provisioning slot';
        END IF;
        UPDATE compute.machines SET deadline = v_now + compute.limit('machine_deploy_seconds') * interval '1 second'
         WHERE machine_id = p_machine_id
        RETURNING * INTO v_machine;
    END IF;
    PERFORM compute.machine_issue(v_machine, v_plan -> v_machine.step ->> 'kind', v_plan -> v_machine.step -> 'args');
    RETURN 'issued ' || (v_plan -> v_machine.step ->> 'kind');
END
$$;
COMMENT ON FUNCTION compute.machine_reconcile(uuid) IS 'Level-triggered: clean a machine whose bare_metal reservation ended, fire a passed deadline, take back an expired op, issue the next op, or finish the state.';

CREATE FUNCTION compute.machines_sweep()
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer := 0;
    v_id    uuid;
BEGIN
    FOR v_id IN (SELECT m.machine_id FROM compute.machines AS m
                   JOIN compute.machine_states AS s ON s.state = m.state
                  WHERE NOT s.failed AND m.state NOT IN ('enrolled', 'manageable', 'active')
                  UNION
                 SELECT m.machine_id FROM compute.machines AS m
                  WHERE m.state = 'active' AND compute.machine_reservation_ended(m) IS NOT NULL)
                 ORDER BY machine_id LIMIT compute.limit('sweep_batch') LOOP
        PERFORM compute.work_poke('machines.reconcile', v_id::text);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION compute.machines_sweep() IS 'Poke the reconciler of every machine in a state that moves by itself (deadlines, lost agents, ended bare_metal reservations).';

-- A machine's node joins: the token must be the machine's, the inventory must carry its system uuid.
CREATE FUNCTION compute.machine_token_used()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_binding compute.machine_join_tokens;
    v_machine compute.machines;
    v_uuid    text;
BEGIN
    SELECT * INTO v_binding FROM compute.machine_join_tokens AS b WHERE b.token_id = NEW.token_id;
    IF NOT FOUND OR NEW.used_by_node IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT n.inventory ->> 'system_uuid' INTO v_uuid FROM compute.nodes AS n WHERE n.node_id = NEW.used_by_node;
    IF v_uuid IS NULL OR pg_catalog.lower(v_uuid) <> pg_catalog.lower(v_binding.system_uuid) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', 'the join token is not valid',
            'A machine''s join token works only for the machine it was made for (its system_uuid).');
    END IF;
    SELECT * INTO v_machine FROM compute.machines AS m WHERE m.machine_id = v_binding.machine_id FOR UPDATE;
    IF v_machine.state <> 'deploy_wait' THEN
        PERFORM compute.raise_error('ACCESS_DENIED', 'the join token is not valid',
            'A machine joins only while it waits for its node (deploy_wait); ask the operator to provide it again.');
    END IF;
    UPDATE compute.machines SET node_id = NEW.used_by_node WHERE machine_id = v_machine.machine_id;
    PERFORM compute.machine_transition(v_machine.machine_id, 'joined');
    RETURN NULL;
END
$$;
CREATE TRIGGER join_tokens_machine AFTER UPDATE OF used_by_node ON compute.join_tokens
    FOR EACH ROW EXECUTE FUNCTION compute.machine_token_used();

-- Site agents: claim operations, return results. FENCED: an op that is not running with that epoch.
CREATE FUNCTION compute.bmc_ops_claim(p_agent_id uuid, p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: the agent's row (serialises its claims: the session cap holds), then op rows in op_id order.
DECLARE
    v_now   timestamptz := compute.compute_now();
    v_room  bigint;
    v_ops   jsonb;
BEGIN
    UPDATE compute.site_agents SET last_heard_at = v_now WHERE agent_id = p_agent_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site agent %s', p_agent_id), 'Register it with ops.site_agent_register.');
    END IF;
    SELECT compute.limit('bmc_sessions_per_agent') - count(*) INTO v_room
      FROM compute.bmc_ops AS o WHERE o.agent_id = p_agent_id AND o.state = 'running';
    WITH picked AS (
        SELECT o.op_id FROM compute.bmc_ops AS o
         WHERE o.agent_id = p_agent_id AND o.state = 'queued'
         ORDER BY o.op_id LIMIT greatest(0, least(v_room, coalesce(p_limit, v_room)))
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE compute.bmc_ops AS o
           SET state = 'running', claimed_at = v_now, deadline = v_now + compute.limit('bmc_op_seconds') * interval '1 second'
          FROM picked WHERE o.op_id = picked.op_id
        RETURNING o.*
    )
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'op_id', c.op_id, 'epoch', c.epoch, 'machine_id', c.machine_id, 'envelope', c.envelope, 'deadline', c.deadline,
               'credentials', (SELECT pg_catalog.jsonb_build_object('version', k.version, 'key_id', k.key_id,
                                                                    'box', pg_catalog.encode(k.box, 'base64'))
                                 FROM compute.machine_credentials AS k WHERE k.machine_id = c.machine_id
                                ORDER BY k.version DESC LIMIT 1))
               ORDER BY c.op_id), '[]')
      INTO v_ops
      FROM claimed AS c JOIN compute.machines AS m ON m.machine_id = c.machine_id;
    RETURN v_ops;
END
$$;
COMMENT ON FUNCTION compute.bmc_ops_claim(uuid, integer) IS 'Queued (signed) ops of the agent, now running (at most bmc_sessions_per_agent running): their envelopes and the sealed credentials.';

CREATE FUNCTION compute.bmc_op_result_check(p_outcome text, p_result jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
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
END
$$;
COMMENT ON FUNCTION compute.bmc_op_result_check(text, jsonb) IS 'INVALID_ARGUMENT unless the outcome and result of a BMC operation are well formed.';

CREATE FUNCTION compute.bmc_op_result(p_agent_id uuid, p_op_id bigint, p_epoch bigint, p_outcome text, p_result jsonb, p_error text)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Lock order: the machine row, then the op row.
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_op      compute.bmc_ops;
    v_machine compute.machines;
    v_error   text := left(p_error, 2000);
    v_secret_sha bytea;
    v_token_id uuid;
BEGIN
    PERFORM compute.bmc_op_result_check(p_outcome, p_result);
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
$$;
COMMENT ON FUNCTION compute.bmc_op_result(uuid, bigint, bigint, text, jsonb, text) IS
    'The result of a running op with its epoch (FENCED otherwise): advance the step, count a failure, or mark the BMC unreachable.';

-- Results signed by the agent (P14). PostgreSQL 15 cannot verify Ed25519: the relay only appends
-- the envelope to the running op (bmc_op_result_append, FENCED unless it names the live op and epoch
-- of this agent), and a worker verifies it with the agent's registered signing key before
-- bmc_op_result applies it (bmc_op_result_verified), or rejects it (bmc_op_result_rejected: never
-- applied; the op is taken back after bmc_op_seconds like any op whose agent went quiet).
-- Envelope: {"v": 1, "purpose": "bmc.result", "body": {op_id, epoch, machine_id, agent_id, outcome,
-- result, error}, "sig"} (py/better_compute/pki/signing.py).
CREATE FUNCTION compute.bmc_op_result_append(p_agent_id uuid, p_envelope jsonb)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Lock order: the op row only.
DECLARE
    v_body jsonb := p_envelope -> 'body';
    v_op   compute.bmc_ops;
BEGIN
    IF p_envelope IS NULL OR pg_catalog.jsonb_typeof(p_envelope) <> 'object' OR p_envelope -> 'v' IS DISTINCT FROM '1'::jsonb
       OR p_envelope ->> 'purpose' IS DISTINCT FROM 'bmc.result' OR pg_catalog.jsonb_typeof(p_envelope -> 'sig') IS DISTINCT FROM 'string'
       OR pg_catalog.jsonb_typeof(v_body) IS DISTINCT FROM 'object'
       OR pg_catalog.jsonb_typeof(v_body -> 'op_id') IS DISTINCT FROM 'number' OR pg_catalog.jsonb_typeof(v_body -> 'epoch') IS DISTINCT FROM 'number'
       OR pg_catalog.jsonb_typeof(v_body -> 'error') NOT IN ('string', 'null') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a BMC result is an envelope {v: 1, purpose: bmc.result, body: {op_id, epoch, machine_id, agent_id, outcome, result, error}, sig} signed by the agent',
            'Upgrade the site agent: it signs its results with its signing key (ops.site_agent_register / ops.site_agent_signing_key_set).');
    END IF;
    PERFORM compute.bmc_op_result_check(v_body ->> 'outcome', v_body -> 'result');
    SELECT * INTO v_op FROM compute.bmc_ops AS o
     WHERE o.op_id = (v_body ->> 'op_id')::numeric AND o.state = 'running' AND o.epoch = (v_body ->> 'epoch')::numeric FOR UPDATE;
    IF NOT FOUND OR v_op.agent_id <> p_agent_id OR v_body ->> 'agent_id' IS DISTINCT FROM p_agent_id::text
       OR v_body ->> 'machine_id' IS DISTINCT FROM v_op.machine_id::text THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('BMC operation %s epoch %s is not a live one of agent %s',
            v_body ->> 'op_id', v_body ->> 'epoch', p_agent_id),
            'The operation was taken back, cancelled or already answered: drop this result.');
    END IF;
    UPDATE compute.bmc_ops SET result_envelope = p_envelope WHERE op_id = v_op.op_id;
    PERFORM compute.work_poke('bmc_ops.result', v_op.op_id::text, '{}', NULL, 1);  -- a worker verifies and applies it (P14)
    RETURN 'relayed';
END
$$;
COMMENT ON FUNCTION compute.bmc_op_result_append(uuid, jsonb) IS
    'Relay a result envelope signed by the agent to its running op (FENCED unless live, INVALID_ARGUMENT unless well formed); a worker verifies and applies it.';

CREATE FUNCTION compute.bmc_op_result_to_verify(p_op_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('envelope', o.result_envelope, 'agent_id', o.agent_id, 'machine_id', o.machine_id,
               'epoch', o.epoch, 'signing_key', pg_catalog.encode(a.signing_key, 'base64'))
      FROM compute.bmc_ops AS o JOIN compute.site_agents AS a ON a.agent_id = o.agent_id
     WHERE o.op_id = p_op_id AND o.result_envelope IS NOT NULL
$$;
COMMENT ON FUNCTION compute.bmc_op_result_to_verify(bigint) IS 'The result envelope relayed for an op, with the agent''s signing key (base64, raw Ed25519; null: none registered) to verify it with; NULL when none waits.';

CREATE FUNCTION compute.bmc_op_result_verified(p_op_id bigint, p_envelope jsonb, p_signing_key bytea)
RETURNS text
LANGUAGE plpgsql
AS $$
-- Lock order: the machine row, then the op row (as bmc_op_result).
DECLARE
    v_op   compute.bmc_ops;
    v_body jsonb := p_envelope -> 'body';
BEGIN
    PERFORM 1 FROM compute.machines AS m
     WHERE m.machine_id = (SELECT o.machine_id FROM compute.bmc_ops AS o WHERE o.op_id = p_op_id) FOR UPDATE;
    SELECT * INTO v_op FROM compute.bmc_ops AS o WHERE o.op_id = p_op_id FOR UPDATE;
    IF NOT FOUND OR v_op.result_envelope IS DISTINCT FROM p_envelope
       OR p_signing_key IS DISTINCT FROM (SELECT a.signing_key FROM compute.site_agents AS a WHERE a.agent_id = v_op.agent_id) THEN
        RETURN 'changed';  -- another result was relayed, or the key changed, meanwhile: the worker looks again
    END IF;
    UPDATE compute.bmc_ops SET result_envelope = NULL WHERE op_id = p_op_id;
    IF v_op.state <> 'running' OR (SELECT m.op_epoch FROM compute.machines AS m WHERE m.machine_id = v_op.machine_id) <> v_op.epoch THEN
        RETURN 'fenced';  -- taken back or cancelled since it was relayed
    END IF;
    RETURN compute.bmc_op_result(v_op.agent_id, v_op.op_id, v_op.epoch, v_body ->> 'outcome', v_body -> 'result', v_body ->> 'error');
END
$$;
COMMENT ON FUNCTION compute.bmc_op_result_verified(bigint, jsonb, bytea) IS
    'A worker verified the relayed result with this (the agent''s current) signing key and that it covers this op and epoch: apply it (bmc_op_result); changed or fenced otherwise.';

CREATE FUNCTION compute.bmc_op_result_rejected(p_op_id bigint, p_envelope jsonb, p_reason text)
RETURNS boolean
LANGUAGE sql
AS $$
    UPDATE compute.bmc_ops SET result_envelope = NULL, result_rejected = left(coalesce(p_reason, 'rejected'), 2000)
     WHERE op_id = p_op_id AND result_envelope = p_envelope
    RETURNING true
$$;
COMMENT ON FUNCTION compute.bmc_op_result_rejected(bigint, jsonb, text) IS
    'A worker found that the relayed result does not verify with the agent''s signing key (or covers another op): dropped, the reason kept; never applied.';

CREATE FUNCTION compute.machine_json(p_machine compute.machines)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('machine_id', p_machine.machine_id, 'name', p_machine.name, 'site_id', p_machine.site_id,
        'pool_id', p_machine.pool_id, 'agent_id', p_machine.agent_id, 'bmc_address', p_machine.bmc_address,
        'system_uuid', p_machine.system_uuid, 'serial', p_machine.serial, 'image_url', p_machine.image_url,
        'state', p_machine.state, 'state_since', p_machine.state_since, 'step', p_machine.step,
        'quarantined', (SELECT s.failed FROM compute.machine_states AS s WHERE s.state = p_machine.state),
        'generation', p_machine.generation, 'observed_generation', p_machine.observed_generation,
        'failure_count', p_machine.failure_count, 'deadline', p_machine.deadline, 'last_error', p_machine.last_error,
        'bmc_reachable', p_machine.bmc_reachable, 'credentials_tried', p_machine.credentials_tried,
        'credentials_worked', p_machine.credentials_worked, 'node_id', p_machine.node_id,
        'credentials_version', (SELECT max(k.version) FROM compute.machine_credentials AS k WHERE k.machine_id = p_machine.machine_id));
$$;
COMMENT ON FUNCTION compute.machine_json(compute.machines) IS 'A machine as operators see it (never its credentials: only their version).';

-- Operators (ops, bc_operator; the API's machines.* methods call the same compute functions).
CREATE FUNCTION compute.site_agent_register(p_agent_id uuid, p_site_id uuid, p_name text, p_public_key bytea,
                                             p_signing_key bytea)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_public_key IS NULL OR octet_length(p_public_key) <> 32 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a site agent key is 32 bytes (raw X25519 public key)',
            'Run better-compute serve site-agent --print-public-key and pass what it prints.');
    END IF;
    IF octet_length(p_signing_key) <> 32 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a site agent''s signing key is 32 bytes (raw Ed25519 public key)',
            'Run better-compute serve site-agent --print-public-key and pass the signing key it prints.');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.sites AS s WHERE s.site_id = p_site_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site %s', p_site_id), 'List the sites in ops.pool_capacity.');
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid site agent name %L', p_name),
            'Use lower-case letters, digits, ".", "_" and "-" (at most 63).');
    END IF;
    INSERT INTO compute.site_agents (agent_id, site_id, name, public_key, key_id, created_at, signing_key)
    VALUES (p_agent_id, p_site_id, p_name, p_public_key, left(pg_catalog.encode(pg_catalog.sha256(p_public_key), 'hex'), 16),
            compute.compute_now(), p_signing_key)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('ALREADY_EXISTS', pg_catalog.format('site agent %s exists in site %s', p_name, p_site_id),
            'Pick another name, or use the agent that exists (ops.site_agents).');
    END IF;
    RETURN p_agent_id;
END
$$;
COMMENT ON FUNCTION compute.site_agent_register(uuid, uuid, text, bytea, bytea) IS 'Register a site agent (with this id), the X25519 public key credentials are sealed to and the Ed25519 key its results are signed with.';

CREATE FUNCTION compute.site_agent_register(p_agent_id uuid, p_site_id uuid, p_name text, p_public_key bytea)
RETURNS uuid
LANGUAGE sql
AS $$ SELECT compute.site_agent_register(p_agent_id, p_site_id, p_name, p_public_key, NULL) $$;
COMMENT ON FUNCTION compute.site_agent_register(uuid, uuid, text, bytea) IS 'Register a site agent without a signing key (none of its results is applied until ops.site_agent_signing_key_set).';

CREATE FUNCTION ops.site_agent_register(p_site_id uuid, p_name text, p_public_key bytea, p_signing_key bytea DEFAULT NULL) RETURNS uuid
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.site_agent_register(pg_catalog.gen_random_uuid(), p_site_id, p_name, p_public_key, p_signing_key)
$$;
COMMENT ON FUNCTION ops.site_agent_register(uuid, text, bytea, bytea) IS 'Register a site agent, the X25519 public key credentials are sealed to and the Ed25519 key its results are signed with (without one, none of its results is applied).';

CREATE FUNCTION compute.site_agent_signing_key_set(p_agent_id uuid, p_signing_key bytea)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_signing_key IS NULL OR octet_length(p_signing_key) <> 32 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a site agent''s signing key is 32 bytes (raw Ed25519 public key)',
            'Run better-compute serve site-agent --print-public-key and pass the signing key it prints.');
    END IF;
    UPDATE compute.site_agents SET signing_key = p_signing_key WHERE agent_id = p_agent_id;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no site agent %s', p_agent_id), 'List them in ops.site_agents.');
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION compute.site_agent_signing_key_set(uuid, bytea) IS 'Set (or rotate) the Ed25519 key a site agent signs its results with; results relayed before and not yet verified are checked against the new key.';

CREATE FUNCTION ops.site_agent_signing_key_set(p_agent_id uuid, p_signing_key bytea) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.site_agent_signing_key_set(p_agent_id, p_signing_key) $$;
COMMENT ON FUNCTION ops.site_agent_signing_key_set(uuid, bytea) IS 'Set (or rotate) the Ed25519 key a site agent signs its BMC results with (an agent registered without one has none of its results applied).';

CREATE FUNCTION compute.machine_enroll(p_machine_id uuid, p_agent_id uuid, p_pool_id uuid, p_name text, p_bmc_address text,
                                       p_system_uuid text, p_image_url text, p_credentials_key_id text, p_credentials_box bytea)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.machine_enroll(uuid, uuid, uuid, text, text, text, text, text, bytea) IS
    'Enroll a machine by its BMC; credentials only as a box sealed to the agent''s key (with the machine id as associated data).';

CREATE FUNCTION ops.machine_enroll(p_machine_id uuid, p_agent_id uuid, p_pool_id uuid, p_name text, p_bmc_address text,
                                   p_system_uuid text, p_image_url text, p_credentials_key_id text, p_credentials_box bytea)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$
    SELECT compute.machine_enroll(p_machine_id, p_agent_id, p_pool_id, p_name, p_bmc_address, p_system_uuid, p_image_url,
                                  p_credentials_key_id, p_credentials_box)
$$;
COMMENT ON FUNCTION ops.machine_enroll(uuid, uuid, uuid, text, text, text, text, text, bytea) IS
    'Enroll a machine by its BMC; credentials only as a box sealed to the agent''s key (with the machine id as associated data).';

CREATE FUNCTION ops.machine_credentials_set(p_machine text, p_key_id text, p_box bytea)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
DECLARE
    v_machine compute.machines := compute.machine_get(p_machine, true);
    v_version integer;
BEGIN
    IF p_key_id IS DISTINCT FROM (SELECT a.key_id FROM compute.site_agents AS a WHERE a.agent_id = v_machine.agent_id) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the credentials are not sealed to the site agent''s key',
            'Seal them to the key of the machine''s agent (ops.site_agents).');
    END IF;
    BEGIN
        INSERT INTO compute.machine_credentials (machine_id, version, key_id, box, created_at)
        VALUES (v_machine.machine_id, coalesce((SELECT max(k.version) FROM compute.machine_credentials AS k
                                                WHERE k.machine_id = v_machine.machine_id), 0) + 1,
                p_key_id, p_box, compute.compute_now())
        RETURNING version INTO v_version;
    EXCEPTION WHEN check_violation OR not_null_violation THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the sealed credentials are not a box (49 to 4096 bytes)',
            'Seal them with better-compute machines enroll, or better_compute.sealing.seal.');
    END;
    RETURN v_version;
END
$$;
COMMENT ON FUNCTION ops.machine_credentials_set(text, text, bytea) IS 'A new version of a machine''s sealed BMC credentials (the next operation uses it).';

CREATE FUNCTION compute.machine_operator_move(p_machine text, p_event text, p_reason text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_machine compute.machines := compute.machine_get(p_machine, true);
    v_holder  compute.reservations;
BEGIN
    IF p_event = 'release' THEN  -- a tenant's machine is cleaned when its reservation ends, not under it
        SELECT r.* INTO v_holder FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
         WHERE b.node_id = v_machine.node_id AND r.instance_kind = 'bare_metal' AND b.state = 'held'
           AND b.during @> compute.compute_now()
         LIMIT 1;
        IF FOUND THEN
            PERFORM compute.raise_error('CAPACITY_CONFLICT',
                pg_catalog.format('machine %s is held by bare_metal reservation %s until %s', v_machine.name, v_holder.reservation_id,
                                  upper(v_holder.during)),
                'Its release (or its end) cleans the machine; ask its tenant to release it, or wait.');
        END IF;
    END IF;
    RETURN compute.machine_json(compute.machine_transition(v_machine.machine_id, p_event,
        CASE WHEN p_event = 'abort' THEN coalesce('aborted: ' || p_reason, 'aborted by an operator') END, true));
END
$$;
COMMENT ON FUNCTION compute.machine_operator_move(text, text, text) IS 'An operator''s move of a machine (manage, provide, release, retry, abort).';

CREATE FUNCTION ops.machine_manage(p_machine text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_operator_move(p_machine, 'manage', NULL) $$;
CREATE FUNCTION ops.machine_provide(p_machine text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_operator_move(p_machine, 'provide', NULL) $$;
CREATE FUNCTION ops.machine_release(p_machine text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_operator_move(p_machine, 'release', NULL) $$;
CREATE FUNCTION ops.machine_retry(p_machine text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_operator_move(p_machine, 'retry', NULL) $$;
CREATE FUNCTION ops.machine_abort(p_machine text, p_reason text DEFAULT NULL) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_operator_move(p_machine, 'abort', p_reason) $$;
COMMENT ON FUNCTION ops.machine_abort(text, text) IS 'Abort what a machine does (in flight: into its failed state) or leave a failed state.';

CREATE VIEW ops.machines AS
    SELECT m.machine_id, m.name, m.state, s.failed AS quarantined, m.step, m.state_since, m.deadline, m.failure_count, m.last_error,
           m.bmc_reachable, m.bmc_unreachable_since, m.bmc_address, m.system_uuid, m.serial, m.image_url, m.generation,
           m.observed_generation, m.op_epoch, m.node_id, n.name AS node, m.pool_id, m.site_id, a.name AS agent,
           (SELECT max(k.version) FROM compute.machine_credentials AS k WHERE k.machine_id = m.machine_id) AS credentials_version,
           m.credentials_tried, m.credentials_worked,
           (SELECT o.kind || ' ' || o.state FROM compute.bmc_ops AS o WHERE o.machine_id = m.machine_id AND o.state IN ('unsigned', 'queued', 'running')) AS live_op
      FROM compute.machines AS m
      JOIN compute.machine_states AS s ON s.state = m.state
      JOIN compute.site_agents AS a ON a.agent_id = m.agent_id
      LEFT JOIN compute.nodes AS n ON n.node_id = m.node_id;
COMMENT ON VIEW ops.machines IS 'Bare-metal machines: state, quarantine, deadline, failures, BmcReachable, the live BMC operation (never credentials).';

CREATE VIEW ops.machine_transitions AS SELECT t.from_state, t.event, t.to_state, t.by_operator FROM compute.machine_transitions AS t;
COMMENT ON VIEW ops.machine_transitions IS 'The legal moves of a machine.';

CREATE VIEW ops.site_agents AS
    SELECT a.agent_id, a.site_id, a.name, a.key_id, pg_catalog.encode(a.public_key, 'base64') AS public_key, a.created_at, a.last_heard_at
      FROM compute.site_agents AS a;
COMMENT ON VIEW ops.site_agents IS 'Site agents and the public keys BMC credentials are sealed to.';

CREATE VIEW ops.bmc_ops AS
    SELECT o.op_id, o.machine_id, m.name AS machine, o.epoch, o.state_name, o.generation, o.step, o.kind, o.args, o.state, o.created_at,
           o.claimed_at, o.deadline, o.finished_at, o.result, o.error
      FROM compute.bmc_ops AS o JOIN compute.machines AS m ON m.machine_id = o.machine_id;
COMMENT ON VIEW ops.bmc_ops IS 'Every BMC operation and its outcome.';

CREATE FUNCTION ops.machines_list() RETURNS SETOF ops.machines
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT * FROM ops.machines ORDER BY name $$;
COMMENT ON FUNCTION ops.machines_list() IS 'ops.machines, for the CLI (better-compute machines list).';

CREATE FUNCTION compute.machine_show(p_machine text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT compute.machine_json(m) || pg_catalog.jsonb_build_object('operations',
               (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(o) ORDER BY o.op_id DESC), '[]')
                  FROM (SELECT o.op_id, o.epoch, o.state_name, o.generation, o.step, o.kind, o.state, o.created_at, o.finished_at, o.error
                          FROM compute.bmc_ops AS o WHERE o.machine_id = m.machine_id ORDER BY o.op_id DESC LIMIT 20) AS o))
      FROM compute.machine_get(p_machine) AS m
$$;
COMMENT ON FUNCTION compute.machine_show(text) IS 'One machine and its last 20 BMC operations.';

CREATE FUNCTION ops.machine_show(p_machine text) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_show(p_machine) $$;
COMMENT ON FUNCTION ops.machine_show(text) IS 'One machine and its last 20 BMC operations (machines.show).';

CREATE FUNCTION ops.site_agent_key(p_agent_id uuid) RETURNS TABLE (agent_id uuid, key_id text, public_key text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$
    SELECT a.agent_id, a.key_id, pg_catalog.encode(a.public_key, 'base64') FROM compute.site_agents AS a WHERE a.agent_id = p_agent_id
$$;
COMMENT ON FUNCTION ops.site_agent_key(uuid) IS 'The public key to seal a machine''s BMC credentials to.';

-- The API (sql/500_api_catalog.sql): machines.* for the operators of the tenant whose site holds
-- the machines, each with one IAM decision (P7). Credentials arrive only sealed (machines.enroll's
-- credentials_box, writeOnly: IAM and the audit never see it).
CREATE FUNCTION compute.api_machine_agent_json(p_agent compute.site_agents)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('agent_id', p_agent.agent_id, 'site_id', p_agent.site_id, 'name', p_agent.name,
               'key_id', p_agent.key_id, 'public_key', pg_catalog.encode(p_agent.public_key, 'base64'),
               'signing_key', pg_catalog.encode(p_agent.signing_key, 'base64'),
               'created_at', p_agent.created_at, 'last_heard_at', p_agent.last_heard_at);
$$;
COMMENT ON FUNCTION compute.api_machine_agent_json(compute.site_agents) IS 'A site agent as the API answers it (its public key: what credentials are sealed to; its signing key: what its results are verified with).';

CREATE FUNCTION compute.api_input_bytes(p_input jsonb, p_field text)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN pg_catalog.decode(compute.input_text(p_input, p_field), 'base64');
EXCEPTION WHEN invalid_parameter_value OR data_exception THEN
    PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not base64', p_field), 'Pass the bytes base64-encoded.');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.api_input_bytes(jsonb, text) IS 'A base64 input field''s bytes (INVALID_ARGUMENT when it is not base64).';

CREATE FUNCTION compute.api_machines_register_agent(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_agent_id uuid := compute.site_agent_register(p_resource_id::uuid, compute.input_uuid(p_input, 'site_id'),
                                                   compute.input_text(p_input, 'name'), compute.api_input_bytes(p_input, 'public_key'),
                                                   CASE WHEN p_input ? 'signing_key' THEN compute.api_input_bytes(p_input, 'signing_key') END);
BEGIN
    RETURN (SELECT compute.api_machine_agent_json(a) FROM compute.site_agents AS a WHERE a.agent_id = v_agent_id);
END
$$;
COMMENT ON FUNCTION compute.api_machines_register_agent(uuid, text, jsonb) IS 'machines.registerAgent';

CREATE FUNCTION compute.api_machines_agents(p_tenant_id uuid, p_input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.api_machine_agent_json(a) ORDER BY a.name, a.agent_id), '[]')
      FROM compute.site_agents AS a JOIN compute.sites AS s ON s.site_id = a.site_id
     WHERE s.tenant_id = p_tenant_id AND a.site_id = coalesce(compute.input_uuid(p_input, 'site_id', false), a.site_id)
       AND a.agent_id = coalesce(compute.input_uuid(p_input, 'agent_id', false), a.agent_id);
$$;
COMMENT ON FUNCTION compute.api_machines_agents(uuid, jsonb) IS 'machines.agents';

CREATE FUNCTION compute.api_machines_enroll_prepare(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.api_machines_enroll_prepare(uuid, jsonb) IS 'machines.enroll, before the decision: the machine id the caller chose (its credentials are sealed with it); writes nothing.';

CREATE FUNCTION compute.api_machines_enroll_void(p_resource_id text) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$;
COMMENT ON FUNCTION compute.api_machines_enroll_void(text) IS 'machines.enroll, on deny or expiry: nothing was written before the decision.';

CREATE FUNCTION compute.api_machines_enroll(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT compute.machine_enroll(p_resource_id::uuid, compute.input_uuid(p_input, 'agent_id'), compute.input_uuid(p_input, 'pool_id'),
        compute.input_text(p_input, 'name'), compute.input_text(p_input, 'bmc_address'), compute.input_text(p_input, 'system_uuid'),
        compute.input_text(p_input, 'image_url'), compute.input_text(p_input, 'credentials_key_id'),
        compute.api_input_bytes(p_input, 'credentials_box'));
$$;
COMMENT ON FUNCTION compute.api_machines_enroll(uuid, text, jsonb) IS 'machines.enroll';

CREATE FUNCTION compute.api_machines_manage(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.machine_operator_move(p_resource_id, 'manage', NULL) $$;
COMMENT ON FUNCTION compute.api_machines_manage(uuid, text, jsonb) IS 'machines.manage';
CREATE FUNCTION compute.api_machines_provide(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.machine_operator_move(p_resource_id, 'provide', NULL) $$;
COMMENT ON FUNCTION compute.api_machines_provide(uuid, text, jsonb) IS 'machines.provide';
CREATE FUNCTION compute.api_machines_release(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.machine_operator_move(p_resource_id, 'release', NULL) $$;
COMMENT ON FUNCTION compute.api_machines_release(uuid, text, jsonb) IS 'machines.release';
CREATE FUNCTION compute.api_machines_retry(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.machine_operator_move(p_resource_id, 'retry', NULL) $$;
COMMENT ON FUNCTION compute.api_machines_retry(uuid, text, jsonb) IS 'machines.retry';
CREATE FUNCTION compute.api_machines_abort(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.machine_operator_move(p_resource_id, 'abort', compute.input_text(p_input, 'reason', false)) $$;
COMMENT ON FUNCTION compute.api_machines_abort(uuid, text, jsonb) IS 'machines.abort';

CREATE FUNCTION compute.api_machines_list(p_tenant_id uuid, p_input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.machine_json(m) ORDER BY m.name, m.machine_id), '[]')
      FROM (SELECT m.* FROM compute.machines AS m JOIN compute.sites AS s ON s.site_id = m.site_id
             WHERE s.tenant_id = p_tenant_id AND m.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), m.pool_id)
               AND m.state = coalesce(compute.input_text(p_input, 'state', false), m.state)
             ORDER BY m.name, m.machine_id LIMIT compute.list_limit(p_input)) AS m;
$$;
COMMENT ON FUNCTION compute.api_machines_list(uuid, jsonb) IS 'machines.list (by name)';

CREATE FUNCTION compute.api_machines_show(p_tenant_id uuid, p_input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT compute.machine_show(compute.input_uuid(p_input, 'machine_id')::text) $$;
COMMENT ON FUNCTION compute.api_machines_show(uuid, jsonb) IS 'machines.show';

INSERT INTO api.methods (method, action, resource_type, kind, summary, input_schema, function, resource_key, parent_type,
                         parent_key, prepare_function, void_function, event_type) VALUES
    ('machines.registerAgent', 'compute:machines:registerAgent', 'compute-site-agent', 'mutation',
     'Register a site agent of a site, the X25519 public key BMC credentials are sealed to and the Ed25519 key its results are signed with.',
     '{"type":"object","properties":{"site_id":{"$piece":"uuid"},"name":{"$piece":"name"},"public_key":{"type":"string","pattern":"^[A-Za-z0-9+/]{43}=$"},"signing_key":{"type":"string","pattern":"^[A-Za-z0-9+/]{43}=$"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["site_id","name","public_key"],"additionalProperties":false}',
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

-- Workers (worker_api, bc_worker).
CREATE FUNCTION worker_api.machine_reconcile(p_machine_id uuid) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machine_reconcile(p_machine_id) $$;
CREATE FUNCTION worker_api.machines_sweep() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.machines_sweep() $$;
CREATE FUNCTION worker_api.bmc_op_to_sign(p_op_id bigint) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_to_sign(p_op_id) $$;
CREATE FUNCTION worker_api.bmc_op_signed(p_op_id bigint, p_envelope jsonb) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_signed(p_op_id, p_envelope) $$;
CREATE FUNCTION worker_api.bmc_op_result_to_verify(p_op_id bigint) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_result_to_verify(p_op_id) $$;
CREATE FUNCTION worker_api.bmc_op_result_verified(p_op_id bigint, p_envelope jsonb, p_signing_key bytea) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_result_verified(p_op_id, p_envelope, p_signing_key) $$;
CREATE FUNCTION worker_api.bmc_op_result_rejected(p_op_id bigint, p_envelope jsonb, p_reason text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_result_rejected(p_op_id, p_envelope, p_reason) $$;

-- Site agents (site_api, bc_site_agent).
CREATE FUNCTION site_api.now() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.compute_now() $$;
CREATE FUNCTION site_api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION site_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as site agents read it when they start.';
CREATE FUNCTION site_api.bmc_sessions() RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.limit('bmc_sessions_per_agent')::integer $$;
CREATE FUNCTION site_api.ops_claim(p_agent_id uuid, p_limit integer DEFAULT NULL) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_ops_claim(p_agent_id, p_limit) $$;
CREATE FUNCTION site_api.op_result(p_agent_id uuid, p_op_id bigint, p_epoch bigint, p_outcome text, p_result jsonb, p_error text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $$
BEGIN
    PERFORM compute.raise_error('UNSUPPORTED', 'unsigned BMC results are not accepted: a result is signed by the agent',
        'Upgrade the site agent: it answers site_api.op_result(agent_id, envelope) with the result signed by its signing key.');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION site_api.op_result(uuid, bigint, bigint, text, jsonb, text) IS 'Removed: UNSUPPORTED (results are signed by the agent: site_api.op_result(agent_id, envelope)).';
CREATE FUNCTION site_api.op_result(p_agent_id uuid, p_envelope jsonb) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.bmc_op_result_append(p_agent_id, p_envelope) $$;
COMMENT ON FUNCTION site_api.op_result(uuid, jsonb) IS 'Relay the agent''s signed result of a running op (purpose bmc.result); a worker verifies it with the agent''s signing key and applies it.';
