-- VPS instances (docs/architecture.md §12, issue 15): a virtual machine on the node holding its reservation's GPUs.
-- The reservation is an ordinary one (instance kind vps, whole GPUs, one node), so the bookings
-- table stays the only exclusive allocator: an instance's vCPUs and memory are its offering's
-- per-atom amounts times its GPUs, never allocated by themselves. The instance's life follows its
-- booking: while the booking holds now it is in its node's spec (compute.node_spec_document: key
-- "instances"); once the booking ended (release, lease expiry, end of window) it is deleting, and
-- deleted when the node acknowledged a spec generation without it (its domain destroyed, its disk
-- gone). A node that went quiet keeps its instances (P6): nothing here looks at sessions.
--
-- States: pending (provisional, before the IAM decision) -> provisioning (admitted; in the spec) ->
-- running <-> stopped -> deleting -> deleted; or failed (denied, a bad image). Legal moves are the
-- rows of compute.instance_transitions and a trigger refuses every other one, whatever the caller.
-- Desired changes (start, stop, reboot) bump the instance's generation; the node reports the
-- generation it applied (observed_generation) with the domain's state and conditions.
--
-- Lock order: instance rows (by id), then the node's spec row (compute.node_spec_refresh).
SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('instance_ssh_keys',                16, 'count',   'SSH public keys one instance may take.'),
    ('instance_disk_gib_max',          4096, 'count',   'Largest root disk of one instance, in GiB.');

CREATE TABLE compute.instance_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    CONSTRAINT instance_transitions_pkey PRIMARY KEY (from_state, to_state)
);
COMMENT ON TABLE compute.instance_transitions IS 'The legal moves of an instance''s state; every other is refused.';
INSERT INTO compute.instance_transitions (from_state, to_state) VALUES
    ('pending', 'provisioning'), ('pending', 'failed'),
    ('provisioning', 'running'), ('provisioning', 'failed'), ('provisioning', 'deleting'),
    ('running', 'stopped'), ('stopped', 'running'),
    ('running', 'failed'), ('stopped', 'failed'),
    ('running', 'deleting'), ('stopped', 'deleting'), ('failed', 'deleting'),
    ('deleting', 'deleted');

CREATE TABLE compute.instances (
    instance_id         uuid CONSTRAINT instances_pkey PRIMARY KEY,
    tenant_id           uuid NOT NULL CONSTRAINT instances_tenant_id_fkey REFERENCES compute.tenants,
    project_id          uuid,
    pool_id             uuid NOT NULL CONSTRAINT instances_pool_id_fkey REFERENCES compute.pools,
    reservation_id      uuid NOT NULL CONSTRAINT instances_reservation_id_key UNIQUE
                        CONSTRAINT instances_reservation_id_fkey REFERENCES compute.reservations,
    node_id             uuid NOT NULL CONSTRAINT instances_node_id_fkey REFERENCES compute.nodes,
    image               text NOT NULL CONSTRAINT instances_image_check CHECK (image ~ '^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$'),
    vcpus               integer NOT NULL CONSTRAINT instances_vcpus_check CHECK (vcpus > 0),
    memory_mib          integer NOT NULL CONSTRAINT instances_memory_mib_check CHECK (memory_mib > 0),
    disk_gib            integer NOT NULL CONSTRAINT instances_disk_gib_check CHECK (disk_gib > 0),
    ssh_keys            text[] NOT NULL CONSTRAINT instances_ssh_keys_check CHECK (cardinality(ssh_keys) BETWEEN 1 AND 64),
    state               text NOT NULL CONSTRAINT instances_state_check CHECK (state IN ('pending', 'provisioning', 'running', 'stopped', 'deleting', 'deleted', 'failed')),
    reboots             integer NOT NULL DEFAULT 0 CONSTRAINT instances_reboots_check CHECK (reboots >= 0),
    generation          bigint NOT NULL DEFAULT 1 CONSTRAINT instances_generation_check CHECK (generation > 0),
    observed_generation bigint CONSTRAINT instances_observed_generation_check CHECK (observed_generation <= generation),
    observed_at         timestamptz,
    conditions          jsonb NOT NULL DEFAULT '[]' CONSTRAINT instances_conditions_check CHECK (jsonb_typeof(conditions) = 'array'),
    removed_generation  bigint,
    failure             text,
    created_at          timestamptz NOT NULL,
    changed_at          timestamptz NOT NULL,
    CONSTRAINT instances_project_id_tenant_id_fkey FOREIGN KEY (project_id, tenant_id) REFERENCES compute.projects (project_id, tenant_id),
    CONSTRAINT instances_failed_has_failure CHECK (state <> 'failed' OR failure IS NOT NULL),
    CONSTRAINT instances_removing_has_removed_generation CHECK ((state IN ('deleting', 'deleted')) = (removed_generation IS NOT NULL))
);
CREATE INDEX instances_node ON compute.instances (node_id) WHERE state NOT IN ('deleted', 'failed');
CREATE INDEX instances_tenant ON compute.instances (tenant_id, created_at);
COMMENT ON TABLE compute.instances IS 'A VPS: a VM on the node of its reservation''s GPUs, alive while its booking holds.';

CREATE FUNCTION compute.instance_state_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state
       AND NOT EXISTS (SELECT 1 FROM compute.instance_transitions AS t WHERE t.from_state = OLD.state AND t.to_state = NEW.state) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('instance %s is %s and cannot become %s', OLD.instance_id, OLD.state, NEW.state),
            pg_catalog.format('From %s an instance may become: %s.', OLD.state,
                coalesce((SELECT pg_catalog.string_agg(t.to_state, ', ' ORDER BY t.to_state) FROM compute.instance_transitions AS t
                           WHERE t.from_state = OLD.state), 'nothing (it is final)')));
    END IF;
    NEW.changed_at := compute.compute_now();
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION compute.instance_state_guard() IS 'Refuse an instance state change that is not a row of compute.instance_transitions.';
CREATE TRIGGER instances_state_guard BEFORE UPDATE ON compute.instances
    FOR EACH ROW EXECUTE FUNCTION compute.instance_state_guard();

-- -- what the node runs -------------------------------------------------------------------------------

CREATE FUNCTION compute.instance_gpus(p_reservation_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('device_uuid', d.uuid, 'pci_bus_id', d.pci_bus_id)
                                         ORDER BY d.pci_bus_id), '[]')
      FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
     WHERE b.reservation_id = p_reservation_id AND b.state = 'held';
$$;
COMMENT ON FUNCTION compute.instance_gpus(uuid) IS 'The GPUs (uuid, PCI bus id from the inventory) an instance''s live bookings hold.';

CREATE FUNCTION compute.node_spec_instances(p_node_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    -- Instances whose booking holds now and that did not fail: what the node must run (or keep stopped).
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'instance_id', i.instance_id, 'domain', 'bc-' || i.instance_id, 'generation', i.generation,
               'power', CASE WHEN i.state = 'stopped' THEN 'stopped' ELSE 'running' END, 'reboots', i.reboots,
               'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib, 'disk_gib', i.disk_gib,
               'ssh_keys', pg_catalog.to_jsonb(i.ssh_keys), 'gpus', compute.instance_gpus(i.reservation_id))
               ORDER BY i.instance_id), '[]')
      FROM compute.instances AS i
     WHERE i.node_id = p_node_id AND i.state IN ('provisioning', 'running', 'stopped')
       AND EXISTS (SELECT 1 FROM compute.active_bookings AS b
                    WHERE b.reservation_id = i.reservation_id AND b.during @> compute.compute_now());
$$;
COMMENT ON FUNCTION compute.node_spec_instances(uuid) IS 'The instances a node must run now (spec key "instances").';

CREATE FUNCTION compute.instances_settle(p_node_id uuid)
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: the node's spec row (read), then its instances.
DECLARE
    v_spec  compute.node_specs;
    v_count integer;
BEGIN
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = p_node_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The booking ended: deleting, from the first spec generation without the instance.
    UPDATE compute.instances AS i SET state = 'deleting', removed_generation = v_spec.generation
     WHERE i.node_id = p_node_id AND i.state IN ('provisioning', 'running', 'stopped', 'failed')
       AND NOT EXISTS (SELECT 1 FROM compute.active_bookings AS b
                        WHERE b.reservation_id = i.reservation_id AND b.during @> compute.compute_now());
    -- The node applied a spec without it: its domain and disk are gone.
    UPDATE compute.instances AS i SET state = 'deleted'
     WHERE i.node_id = p_node_id AND i.state = 'deleting' AND i.removed_generation <= v_spec.observed_generation;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION compute.instances_settle(uuid) IS 'Instances whose booking ended become deleting; deleted once the node acknowledged a spec without them.';

CREATE FUNCTION compute.instances_spec_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.instances_settle(NEW.node_id);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.instances_spec_changed() IS 'A node''s spec or its acknowledgement moved: settle its instances.';
CREATE TRIGGER node_specs_instances AFTER UPDATE OF generation, observed_generation ON compute.node_specs
    FOR EACH ROW EXECUTE FUNCTION compute.instances_spec_changed();

CREATE FUNCTION compute.instance_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- What the node runs changed (the spec), and the tenant hears of it (the outbox).
    IF TG_OP = 'INSERT' OR (NEW.state, NEW.generation) IS DISTINCT FROM (OLD.state, OLD.generation) THEN
        IF NEW.state <> 'pending' THEN
            PERFORM compute.node_spec_refresh(NEW.node_id);
        END IF;
        PERFORM compute.outbox_emit(NEW.tenant_id, 'instance', NEW.instance_id::text,
            CASE WHEN TG_OP = 'INSERT' THEN 'instance.created'
                 WHEN NEW.state IS DISTINCT FROM OLD.state THEN 'instance.' || NEW.state
                 ELSE 'instance.changed' END,
            pg_catalog.jsonb_build_object('instance_id', NEW.instance_id, 'state', NEW.state, 'reservation_id', NEW.reservation_id,
                                          'node_id', NEW.node_id, 'generation', NEW.generation, 'failure', NEW.failure));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.instance_changed() IS 'Refresh the node''s spec and emit an event when an instance''s state or generation changed.';
CREATE TRIGGER instances_changed AFTER INSERT OR UPDATE ON compute.instances
    FOR EACH ROW EXECUTE FUNCTION compute.instance_changed();

-- -- what the node reports --------------------------------------------------------------------------

CREATE FUNCTION compute.instances_observed(p_node_id uuid, p_instances jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the node's instances by id (then node_specs, through the instances' trigger).
DECLARE
    v_report   jsonb;
    v_instance compute.instances;
BEGIN
    IF p_instances IS NULL THEN
        RETURN;
    END IF;
    IF pg_catalog.jsonb_typeof(p_instances) <> 'array' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'instances are a JSON array', 'Send one object per instance of the spec.');
    END IF;
    FOR v_report IN SELECT r.value FROM pg_catalog.jsonb_array_elements(p_instances) AS r ORDER BY r.value ->> 'instance_id' LOOP
        IF pg_catalog.jsonb_typeof(v_report -> 'generation') IS DISTINCT FROM 'number'
           OR (v_report ->> 'state') IS NULL OR (v_report ->> 'state') NOT IN ('running', 'stopped', 'failed')
           OR (v_report ->> 'instance_id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', 'an instance report needs instance_id, generation and state',
                'Send {"instance_id", "generation", "state": running|stopped|failed, "reason", "conditions"}.');
        END IF;
        SELECT * INTO v_instance FROM compute.instances AS i
         WHERE i.instance_id = (v_report ->> 'instance_id')::uuid AND i.node_id = p_node_id FOR UPDATE;
        CONTINUE WHEN NOT FOUND OR v_instance.state NOT IN ('provisioning', 'running', 'stopped')
                      OR (v_report ->> 'generation')::bigint > v_instance.generation;
        UPDATE compute.instances
           SET observed_generation = greatest(observed_generation, (v_report ->> 'generation')::bigint),
               observed_at = compute.compute_now(),
               conditions = coalesce(v_report -> 'conditions', '[]'),
               state = CASE WHEN v_report ->> 'state' = 'failed' THEN 'failed'
                            WHEN v_instance.state = 'provisioning' AND v_report ->> 'state' = 'running'
                                 AND (v_report ->> 'generation')::bigint = v_instance.generation THEN 'running'
                            ELSE v_instance.state END,
               failure = CASE WHEN v_report ->> 'state' = 'failed'
                              THEN pg_catalog.left(coalesce(v_report ->> 'reason', 'the node could not run the instance'), 1000) END
         WHERE instance_id = v_instance.instance_id;
    END LOOP;
END
$$;
COMMENT ON FUNCTION compute.instances_observed(uuid, jsonb) IS 'A node''s verified report of its domains: observed generation, running, or failed (a bad image fails that instance only).';

-- -- lifecycle --------------------------------------------------------------------------------------

CREATE FUNCTION compute.instance_lock(p_instance_id uuid)
RETURNS compute.instances
LANGUAGE plpgsql
AS $$
DECLARE
    v_instance compute.instances;
BEGIN
    SELECT * INTO v_instance FROM compute.instances AS i WHERE i.instance_id = p_instance_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no instance %s', p_instance_id), 'List the tenant''s instances (instances.list).');
    END IF;
    RETURN v_instance;
END
$$;
COMMENT ON FUNCTION compute.instance_lock(uuid) IS 'The instance row, locked FOR UPDATE; NOT_FOUND when there is none.';

CREATE FUNCTION compute.instance_document(p_instance_id uuid)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('instance_id', i.instance_id, 'domain', 'bc-' || i.instance_id, 'state', i.state,
               'pool_id', i.pool_id, 'project_id', i.project_id, 'reservation_id', i.reservation_id, 'node_id', i.node_id,
               'node', n.name, 'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib, 'disk_gib', i.disk_gib,
               'ssh_keys', cardinality(i.ssh_keys), 'gpus', compute.instance_gpus(i.reservation_id),
               'start', lower(r.during), 'end', upper(r.during), 'generation', i.generation,
               'observed_generation', i.observed_generation, 'conditions', i.conditions, 'failure', i.failure,
               'created_at', i.created_at, 'changed_at', i.changed_at)
      FROM compute.instances AS i JOIN compute.nodes AS n ON n.node_id = i.node_id
      JOIN compute.reservations AS r ON r.reservation_id = i.reservation_id
     WHERE i.instance_id = p_instance_id;
$$;
COMMENT ON FUNCTION compute.instance_document(uuid) IS 'An instance as the API answers it.';

CREATE FUNCTION compute.instance_prepare(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
-- Lock order: as compute.reserve (quota rows, devices), then the new instance row.
DECLARE
    v_pool_id     uuid := compute.input_uuid(p_input, 'pool_id');
    v_gpus        integer := compute.input_integer(p_input, 'gpus');
    v_disk        integer := coalesce(compute.input_integer(p_input, 'disk_gib', false), 50);
    v_keys        text[];
    v_offering    compute.offerings;
    v_reservation jsonb;
    v_id          uuid := pg_catalog.gen_random_uuid();
BEGIN
    SELECT * INTO v_offering FROM compute.offerings AS o
     WHERE o.pool_id = v_pool_id AND o.shape = 'gpu' AND o.instance_kind = 'vps';
    IF NOT FOUND OR v_offering.vcpus_per_atom IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('pool %s offers no VPS', v_pool_id),
            'Offer one first: offerings.create with instance_kind vps, shape gpu, vcpus_per_atom and memory_mib_per_atom.');
    END IF;
    SELECT pg_catalog.array_agg(k.value ORDER BY k.ordinality) INTO v_keys
      FROM pg_catalog.jsonb_array_elements_text(p_input -> 'ssh_keys') WITH ORDINALITY AS k;
    IF coalesce(cardinality(v_keys), 0) NOT BETWEEN 1 AND compute.limit('instance_ssh_keys')
       OR EXISTS (SELECT 1 FROM pg_catalog.unnest(v_keys) AS k WHERE k !~ '^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [^\n\r]{0,200})?$') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'ssh_keys are 1 to n OpenSSH public keys',
            pg_catalog.format('Pass 1 to %s lines like "ssh-ed25519 AAAA... you@host" (limit instance_ssh_keys).', compute.limit('instance_ssh_keys')));
    END IF;
    IF v_disk < 1 OR v_disk > compute.limit('instance_disk_gib_max') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('disk_gib %s is out of range', v_disk),
            pg_catalog.format('Use 1 to %s GiB (limit instance_disk_gib_max).', compute.limit('instance_disk_gib_max')));
    END IF;
    -- The GPUs are booked like any reservation's: whole GPUs, all on one node.
    v_reservation := compute.reserve(pg_catalog.jsonb_build_object('tenant_id', p_tenant_id, 'project_id', p_input -> 'project_id',
        'pool_id', v_pool_id, 'shape', 'gpu', 'count', v_gpus, 'end', p_input -> 'end', 'same_node', true, 'instance_kind', 'vps'));
    -- A host whose bcd reported it cannot pass GPUs through (no IOMMU, vfio) takes no new VM. (The
    -- request is refused, not placed elsewhere: compute.place knows nothing of instance kinds yet.)
    IF EXISTS (SELECT 1 FROM compute.bookings AS b JOIN compute.node_specs AS s ON s.node_id = b.node_id,
                      pg_catalog.jsonb_array_elements(s.conditions) AS c
                WHERE b.reservation_id = (v_reservation ->> 'reservation_id')::uuid
                  AND c.value ->> 'type' = 'HypervisorReady' AND c.value ->> 'status' = 'False') THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT', pg_catalog.format('node %s cannot run VMs now', v_reservation #>> '{bookings,0,node}'),
            'Its bcd reports HypervisorReady=False (ops.instances, the node''s conditions); try later, or ask an operator to cordon it.');
    END IF;
    INSERT INTO compute.instances (instance_id, tenant_id, project_id, pool_id, reservation_id, node_id, image, vcpus, memory_mib,
                                   disk_gib, ssh_keys, state, created_at, changed_at)
    SELECT v_id, p_tenant_id, r.project_id, r.pool_id, r.reservation_id,
           (SELECT b.node_id FROM compute.bookings AS b WHERE b.reservation_id = r.reservation_id LIMIT 1),
           compute.input_text(p_input, 'image'), v_gpus * v_offering.vcpus_per_atom, v_gpus * v_offering.memory_mib_per_atom,
           v_disk, v_keys, 'pending', compute.compute_now(), compute.compute_now()
      FROM compute.reservations AS r WHERE r.reservation_id = (v_reservation ->> 'reservation_id')::uuid;
    RETURN pg_catalog.jsonb_build_object('id', v_id, 'attributes', pg_catalog.jsonb_build_object(
        'reservation_id', v_reservation ->> 'reservation_id', 'end', v_reservation -> 'end',
        'node', v_reservation #> '{bookings,0,node}', 'vcpus', v_gpus * v_offering.vcpus_per_atom,
        'memory_mib', v_gpus * v_offering.memory_mib_per_atom));
END
$$;
COMMENT ON FUNCTION compute.instance_prepare(uuid, jsonb) IS 'instances.create, before the decision: book the GPUs provisionally and write the pending instance.';

CREATE FUNCTION compute.api_instances_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_instance compute.instances := compute.instance_lock(p_resource_id::uuid);
BEGIN
    PERFORM compute.reservation_activate(v_instance.reservation_id);
    UPDATE compute.instances SET state = 'provisioning' WHERE instance_id = v_instance.instance_id;
    RETURN compute.instance_document(v_instance.instance_id);
END
$$;
COMMENT ON FUNCTION compute.api_instances_create(uuid, text, jsonb) IS 'instances.create, on allow: activate the booking; the instance enters its node''s spec.';

CREATE FUNCTION compute.api_instances_void(p_resource_id text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_instance compute.instances;
BEGIN
    SELECT * INTO v_instance FROM compute.instances AS i WHERE i.instance_id = p_resource_id::uuid FOR UPDATE;
    IF FOUND AND v_instance.state = 'pending' THEN
        PERFORM compute.reservation_void(v_instance.reservation_id);
        UPDATE compute.instances SET state = 'failed', failure = 'not admitted' WHERE instance_id = v_instance.instance_id;
    END IF;
END
$$;
COMMENT ON FUNCTION compute.api_instances_void(text) IS 'instances.create, on deny or expiry: void the booking; the instance failed (not admitted).';

CREATE FUNCTION compute.instance_power(p_instance_id uuid, p_verb text)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_instance compute.instances := compute.instance_lock(p_instance_id);
    v_from     text := CASE p_verb WHEN 'start' THEN 'stopped' ELSE 'running' END;
BEGIN
    IF v_instance.state = (CASE p_verb WHEN 'start' THEN 'running' WHEN 'stop' THEN 'stopped' END) THEN
        RETURN compute.instance_document(p_instance_id);  -- already so: a retry changes nothing
    END IF;
    IF v_instance.state <> v_from THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('instance %s is %s', p_instance_id, v_instance.state),
            pg_catalog.format('%s needs a %s instance; instances.show says its state.', p_verb, v_from));
    END IF;
    UPDATE compute.instances
       SET state = CASE p_verb WHEN 'start' THEN 'running' WHEN 'stop' THEN 'stopped' ELSE state END,
           reboots = reboots + CASE p_verb WHEN 'reboot' THEN 1 ELSE 0 END,
           generation = generation + 1
     WHERE instance_id = p_instance_id;
    RETURN compute.instance_document(p_instance_id);
END
$$;
COMMENT ON FUNCTION compute.instance_power(uuid, text) IS 'start (stopped -> running), stop (running -> stopped), reboot (running): a new generation for the node.';

CREATE FUNCTION compute.api_instances_start(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.instance_power(p_resource_id::uuid, 'start'); $$;
COMMENT ON FUNCTION compute.api_instances_start(uuid, text, jsonb) IS 'instances.start';
CREATE FUNCTION compute.api_instances_stop(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.instance_power(p_resource_id::uuid, 'stop'); $$;
COMMENT ON FUNCTION compute.api_instances_stop(uuid, text, jsonb) IS 'instances.stop';
CREATE FUNCTION compute.api_instances_reboot(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT compute.instance_power(p_resource_id::uuid, 'reboot'); $$;
COMMENT ON FUNCTION compute.api_instances_reboot(uuid, text, jsonb) IS 'instances.reboot';

CREATE FUNCTION compute.api_instances_delete(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_instance compute.instances := compute.instance_lock(p_resource_id::uuid);
BEGIN
    -- The VM goes with its booking: release it; the instance is deleting at once and deleted when
    -- the node acknowledged a spec without it.
    PERFORM compute.reservation_release(v_instance.reservation_id);
    PERFORM compute.node_spec_refresh(v_instance.node_id);
    PERFORM compute.instances_settle(v_instance.node_id);
    RETURN compute.instance_document(v_instance.instance_id);
END
$$;
COMMENT ON FUNCTION compute.api_instances_delete(uuid, text, jsonb) IS 'instances.delete: release its booking; the domain and disk go with it.';

CREATE FUNCTION compute.api_instances_show(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT compute.instance_document(i.instance_id) FROM compute.instances AS i
     WHERE i.instance_id = compute.input_uuid(p_input, 'instance_id') AND i.tenant_id = p_tenant_id;
$$;
COMMENT ON FUNCTION compute.api_instances_show(uuid, jsonb) IS 'instances.show';

CREATE FUNCTION compute.api_instances_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.instance_document(i.instance_id) ORDER BY i.created_at DESC), '[]')
      FROM (SELECT i.instance_id, i.created_at FROM compute.instances AS i
             WHERE i.tenant_id = p_tenant_id AND i.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), i.pool_id)
               AND i.state = coalesce(compute.input_text(p_input, 'state', false), i.state)
             ORDER BY i.created_at DESC LIMIT compute.list_limit(p_input)) AS i;
$$;
COMMENT ON FUNCTION compute.api_instances_list(uuid, jsonb) IS 'instances.list (newest first)';

CREATE FUNCTION compute.api_instances_console_url(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    -- No console proxy yet (docs/vps.md): the answer names the serial console of the domain on its
    -- host, which an operator (or a later proxy through the node's session) opens.
    SELECT pg_catalog.jsonb_build_object('instance_id', i.instance_id, 'node', n.name, 'domain', 'bc-' || i.instance_id,
               'url', 'console://' || n.name || '/bc-' || i.instance_id || '/serial0')
      FROM compute.instances AS i JOIN compute.nodes AS n ON n.node_id = i.node_id
     WHERE i.instance_id = compute.input_uuid(p_input, 'instance_id') AND i.tenant_id = p_tenant_id
       AND i.state IN ('provisioning', 'running', 'stopped');
$$;
COMMENT ON FUNCTION compute.api_instances_console_url(uuid, jsonb) IS 'instances.consoleUrl: where the instance''s serial console is';

-- -- operators --------------------------------------------------------------------------------------

CREATE VIEW ops.instances AS
    SELECT i.instance_id, 'bc-' || i.instance_id AS domain, i.tenant_id, i.project_id, p.name AS pool, n.name AS node, i.state,
           i.image, i.vcpus, i.memory_mib, i.disk_gib,
           (SELECT pg_catalog.array_agg(d.pci_bus_id ORDER BY d.pci_bus_id)
              FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
             WHERE b.reservation_id = i.reservation_id AND b.state = 'held') AS gpus_pci,
           i.reservation_id, upper(r.during) AS booked_until, i.generation, i.observed_generation,
           i.observed_generation IS NOT DISTINCT FROM i.generation AS converged, i.conditions, i.failure, i.created_at, i.changed_at
      FROM compute.instances AS i
      JOIN compute.nodes AS n ON n.node_id = i.node_id
      JOIN compute.pools AS p ON p.pool_id = i.pool_id
      JOIN compute.reservations AS r ON r.reservation_id = i.reservation_id;
COMMENT ON VIEW ops.instances IS 'Every VPS: tenant, node, state, size, the PCI addresses of its GPUs, booked until, converged or not, conditions.';

-- -- the API's catalog rows -------------------------------------------------------------------------

INSERT INTO api.methods (method, action, resource_type, kind, summary, input_schema, function, resource_key, parent_type,
                         parent_key, prepare_function, void_function, event_type) VALUES
    ('instances.create', 'compute:instances:create', 'compute-instance', 'mutation',
     'Create a VPS with whole GPUs of a pool passed through (booked before the IAM decision).',
     '{"type":"object","properties":{"pool_id":{"$piece":"uuid"},"gpus":{"type":"integer","minimum":1,"x-limit":{"maximum":"atoms_per_reservation"}},"image":{"type":"string","pattern":"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$"},"ssh_keys":{"type":"array","minItems":1,"items":{"type":"string","minLength":1,"maxLength":16384},"x-limit":{"maxItems":"instance_ssh_keys"}},"disk_gib":{"type":"integer","minimum":1,"x-limit":{"maximum":"instance_disk_gib_max"}},"end":{"$piece":"timestamp"},"project_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["pool_id","gpus","image","ssh_keys","end"],"additionalProperties":false}',
     'compute.api_instances_create(uuid, text, jsonb)', NULL, 'compute-pool', 'pool_id',
     'compute.instance_prepare(uuid, jsonb)', 'compute.api_instances_void(text)', NULL),
    ('instances.start', 'compute:instances:start', 'compute-instance', 'mutation',
     'Start a stopped instance.',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_start(uuid, text, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL),
    ('instances.stop', 'compute:instances:stop', 'compute-instance', 'mutation',
     'Stop a running instance (its GPUs stay booked).',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_stop(uuid, text, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL),
    ('instances.reboot', 'compute:instances:reboot', 'compute-instance', 'mutation',
     'Reboot a running instance.',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_reboot(uuid, text, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL),
    ('instances.delete', 'compute:instances:delete', 'compute-instance', 'mutation',
     'Delete an instance: its booking is released, its domain and disk removed.',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"},"idempotency_key":{"$piece":"idempotency_key"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_delete(uuid, text, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL),
    ('instances.list', 'compute:instances:list', 'compute-instance', 'read',
     'The tenant''s instances, newest first.',
     '{"type":"object","properties":{"pool_id":{"$piece":"uuid"},"state":{"type":"string","enum":["pending","provisioning","running","stopped","deleting","deleted","failed"]},"limit":{"$piece":"list_limit"}},"required":[],"additionalProperties":false}',
     'compute.api_instances_list(uuid, jsonb)', NULL, 'compute-pool', 'pool_id', NULL, NULL, NULL),
    ('instances.show', 'compute:instances:show', 'compute-instance', 'read',
     'One instance: state, node, GPUs (PCI addresses), generation and what the node observed.',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_show(uuid, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL),
    ('instances.consoleUrl', 'compute:instances:consoleUrl', 'compute-instance', 'read',
     'Where an instance''s serial console is.',
     '{"type":"object","properties":{"instance_id":{"$piece":"uuid"}},"required":["instance_id"],"additionalProperties":false}',
     'compute.api_instances_console_url(uuid, jsonb)', 'instance_id', NULL, NULL, NULL, NULL, NULL);
