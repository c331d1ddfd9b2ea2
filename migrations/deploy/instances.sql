-- Deploy better_compute:instances to pg
-- VPS instances (issue 15): compute.instances and its transitions, offerings that state vCPUs and
-- memory per GPU, reservations that know their instance kind, the instances in the node spec (their
-- GPUs never in "devices" nor in "gpus"), what nodes report of their domains, a VPS booking ready once
-- its instance runs, the instances.* API methods.
-- The new objects are sql/700_instances.sql; the functions replaced are as sql/ has them.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE compute.offerings
    ADD COLUMN vcpus_per_atom integer CONSTRAINT offerings_vcpus_per_atom_check CHECK (vcpus_per_atom > 0),
    ADD COLUMN memory_mib_per_atom integer CONSTRAINT offerings_memory_mib_per_atom_check CHECK (memory_mib_per_atom > 0),
    ADD CONSTRAINT offerings_vps_sizes CHECK (instance_kind = 'vps' OR (vcpus_per_atom IS NULL AND memory_mib_per_atom IS NULL));

ALTER TABLE compute.reservations
    ADD COLUMN instance_kind text NOT NULL DEFAULT 'devices'
        CONSTRAINT reservations_instance_kind_check CHECK (instance_kind IN ('devices', 'bare_metal', 'vps'));

CREATE TABLE compute.instance_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    CONSTRAINT instance_transitions_pkey PRIMARY KEY (from_state, to_state)
);

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

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.api_instances_console_url(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    -- No console proxy yet (docs/vps.md): the answer names the serial console of the domain on its
    -- host, which an operator (or a later proxy through the node's session) opens.
    SELECT pg_catalog.jsonb_build_object('instance_id', i.instance_id, 'node', n.name, 'domain', 'bc-' || i.instance_id,
               'url', 'console://' || n.name || '/bc-' || i.instance_id || '/serial0')
      FROM compute.instances AS i JOIN compute.nodes AS n ON n.node_id = i.node_id
     WHERE i.instance_id = compute.input_uuid(p_input, 'instance_id') AND i.tenant_id = p_tenant_id
       AND i.state IN ('provisioning', 'running', 'stopped');
$function$;

COMMENT ON FUNCTION compute.api_instances_console_url(uuid,jsonb) IS 'instances.consoleUrl: where the instance''s serial console is';

CREATE OR REPLACE FUNCTION compute.api_instances_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_instance compute.instances := compute.instance_lock(p_resource_id::uuid);
BEGIN
    PERFORM compute.reservation_activate(v_instance.reservation_id);
    UPDATE compute.instances SET state = 'provisioning' WHERE instance_id = v_instance.instance_id;
    RETURN compute.instance_document(v_instance.instance_id);
END
$function$;

COMMENT ON FUNCTION compute.api_instances_create(uuid,text,jsonb) IS 'instances.create, on allow: activate the booking; the instance enters its node''s spec.';

CREATE OR REPLACE FUNCTION compute.api_instances_delete(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.api_instances_delete(uuid,text,jsonb) IS 'instances.delete: release its booking; the domain and disk go with it.';

CREATE OR REPLACE FUNCTION compute.api_instances_list(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.instance_document(i.instance_id) ORDER BY i.created_at DESC), '[]')
      FROM (SELECT i.instance_id, i.created_at FROM compute.instances AS i
             WHERE i.tenant_id = p_tenant_id AND i.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), i.pool_id)
               AND i.state = coalesce(compute.input_text(p_input, 'state', false), i.state)
             ORDER BY i.created_at DESC LIMIT compute.list_limit(p_input)) AS i;
$function$;

COMMENT ON FUNCTION compute.api_instances_list(uuid,jsonb) IS 'instances.list (newest first)';

CREATE OR REPLACE FUNCTION compute.api_instances_reboot(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.instance_power(p_resource_id::uuid, 'reboot'); $function$;

COMMENT ON FUNCTION compute.api_instances_reboot(uuid,text,jsonb) IS 'instances.reboot';

CREATE OR REPLACE FUNCTION compute.api_instances_show(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT compute.instance_document(i.instance_id) FROM compute.instances AS i
     WHERE i.instance_id = compute.input_uuid(p_input, 'instance_id') AND i.tenant_id = p_tenant_id;
$function$;

COMMENT ON FUNCTION compute.api_instances_show(uuid,jsonb) IS 'instances.show';

CREATE OR REPLACE FUNCTION compute.api_instances_start(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.instance_power(p_resource_id::uuid, 'start'); $function$;

COMMENT ON FUNCTION compute.api_instances_start(uuid,text,jsonb) IS 'instances.start';

CREATE OR REPLACE FUNCTION compute.api_instances_stop(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT compute.instance_power(p_resource_id::uuid, 'stop'); $function$;

COMMENT ON FUNCTION compute.api_instances_stop(uuid,text,jsonb) IS 'instances.stop';

CREATE OR REPLACE FUNCTION compute.api_instances_void(p_resource_id text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_instance compute.instances;
BEGIN
    SELECT * INTO v_instance FROM compute.instances AS i WHERE i.instance_id = p_resource_id::uuid FOR UPDATE;
    IF FOUND AND v_instance.state = 'pending' THEN
        PERFORM compute.reservation_void(v_instance.reservation_id);
        UPDATE compute.instances SET state = 'failed', failure = 'not admitted' WHERE instance_id = v_instance.instance_id;
    END IF;
END
$function$;

COMMENT ON FUNCTION compute.api_instances_void(text) IS 'instances.create, on deny or expiry: void the booking; the instance failed (not admitted).';

CREATE OR REPLACE FUNCTION compute.api_offerings_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_offering_id uuid;
    v_kind        text := coalesce(compute.input_text(p_input, 'instance_kind', false), 'devices');
BEGIN
    IF v_kind NOT IN ('devices', 'vps') THEN  -- fail closed (P11): the kind exists in the model, its flow does not yet
        PERFORM compute.raise_error('UNSUPPORTED', pg_catalog.format('%s offerings are not supported yet', v_kind),
            'Offer devices (GPUs, MIG instances, time-slice slots) or vps; bare metal comes with its provisioning flow.');
    END IF;
    -- A VPS offers whole GPUs with CPU and memory per GPU (sql/700_instances.sql); devices take neither.
    IF v_kind = 'vps' AND (compute.input_text(p_input, 'shape') <> 'gpu' OR compute.input_integer(p_input, 'vcpus_per_atom', false) IS NULL
                           OR compute.input_integer(p_input, 'memory_mib_per_atom', false) IS NULL) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a vps offering is of shape gpu and states vcpus_per_atom and memory_mib_per_atom',
            'Pass shape gpu, vcpus_per_atom and memory_mib_per_atom (what one GPU of the VM brings).');
    ELSIF v_kind = 'devices' AND (p_input ? 'vcpus_per_atom' OR p_input ? 'memory_mib_per_atom') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'only a vps offering states vcpus_per_atom and memory_mib_per_atom',
            'Leave them out, or pass instance_kind vps.');
    END IF;
    -- An offer of a shape the pool already offers changes its limits (and keeps its id).
    v_offering_id := compute.offering_create(compute.input_uuid(p_input, 'pool_id'), compute.input_text(p_input, 'shape'),
        compute.input_integer(p_input, 'max_count'), compute.input_integer(p_input, 'max_duration_seconds') * interval '1 second',
        v_kind, p_resource_id::uuid);
    UPDATE compute.offerings SET vcpus_per_atom = compute.input_integer(p_input, 'vcpus_per_atom', false),
                                 memory_mib_per_atom = compute.input_integer(p_input, 'memory_mib_per_atom', false)
     WHERE offering_id = v_offering_id AND v_kind = 'vps';
    RETURN (SELECT compute.offering_json(o) FROM compute.offerings AS o WHERE o.offering_id = v_offering_id);
END
$function$;

CREATE OR REPLACE FUNCTION compute.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now       timestamptz := compute.compute_now();
    v_booking   compute.bookings;
    v_state     text;
    v_grant     compute.node_grants;
    v_spec      compute.node_specs;
    v_node      text;
    v_heard     text;
    v_previous  text;
    v_failed    text;
    v_kind      text;
BEGIN
    SELECT * INTO v_booking FROM compute.bookings AS b WHERE b.booking_id = p_booking_id;
    SELECT r.state, r.instance_kind INTO v_state, v_kind FROM compute.reservations AS r WHERE r.reservation_id = v_booking.reservation_id;
    IF v_state = 'provisional' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'waiting for the admission''s decision');
    ELSIF v_state <> 'active' OR v_booking.state <> 'active' OR upper(v_booking.during) <= v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason', 'ended');
    ELSIF lower(v_booking.during) > v_now THEN
        RETURN pg_catalog.jsonb_build_object('state', 'not_running', 'reason',
            pg_catalog.format('starts at %s', pg_catalog.to_char(lower(v_booking.during) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
    END IF;
    SELECT n.name, CASE WHEN ns.closed_at IS NULL AND ns.last_heard_at > v_now - compute.limit('session_timeout_seconds') * interval '1 second'
                        THEN 'connected'
                        WHEN ns.last_heard_at IS NULL THEN 'not connected, never heard'
                        ELSE pg_catalog.format('not connected, last heard %s s ago', round(extract(epoch FROM v_now - ns.last_heard_at))) END
      INTO v_node, v_heard
      FROM compute.nodes AS n LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
     WHERE n.node_id = v_booking.node_id;
    -- A VPS booking (sql/700_instances.sql) is no device of the spec (its GPU is passed through to
    -- the instance's VM, never granted): ready once the node reported the instance running at its
    -- newest generation; failed when the instance failed.
    IF v_kind = 'vps' THEN
        RETURN (SELECT CASE WHEN i.state = 'failed' THEN pg_catalog.jsonb_build_object('state', 'failed', 'reason', i.failure)
                            WHEN i.state = 'running' AND i.observed_generation = i.generation
                                THEN pg_catalog.jsonb_build_object('state', 'ready', 'reason', NULL)
                            ELSE pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
                                     pg_catalog.format('node %s (%s) has not reported instance %s running at generation %s (it is %s)',
                                                       v_node, v_heard, i.instance_id, i.generation, i.state)) END
                  FROM compute.instances AS i WHERE i.reservation_id = v_booking.reservation_id);
    END IF;
    SELECT * INTO v_grant FROM compute.node_grants AS g WHERE g.booking_id = p_booking_id;
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = v_booking.node_id;
    IF v_grant.booking_id IS NULL OR v_grant.withdrawn_generation IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('the spec of node %s does not grant the device yet (its tick adds bookings as they start)', v_node));
    END IF;
    -- Earlier holders of the same slices of this GPU whose withdrawal the node has not confirmed.
    SELECT pg_catalog.format('; generation %s withdraws reservation %s from this GPU', g.withdrawn_generation, b.reservation_id)
      INTO v_previous
      FROM compute.node_grants AS g JOIN compute.bookings AS b ON b.booking_id = g.booking_id
     WHERE g.node_id = v_booking.node_id AND g.withdrawn_generation IS NOT NULL AND g.withdrawal_acked_generation IS NULL
       AND g.fenced_at IS NULL AND b.booking_id <> p_booking_id AND b.device_id = v_booking.device_id
       AND b.slices && v_booking.slices AND b.shares && v_booking.shares
     ORDER BY g.withdrawn_generation DESC LIMIT 1;
    -- The node could not apply a generation that grants it: its condition.
    SELECT c ->> 'type' || ': ' || coalesce(c ->> 'message', '') INTO v_failed
      FROM pg_catalog.jsonb_array_elements(v_spec.conditions) AS c
     WHERE c ->> 'type' = 'SpecFailed' AND (c ->> 'generation') ~ '^[0-9]{1,18}$' AND (c ->> 'generation')::bigint >= v_grant.granted_generation
     LIMIT 1;
    IF v_failed IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'failed', 'reason', pg_catalog.left(v_failed, 1000));
    END IF;
    IF coalesce(v_spec.observed_generation, 0) < v_grant.granted_generation THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s (%s) has not acknowledged spec generation %s, which grants this device (acknowledged: %s)%s',
                              v_node, v_heard, v_grant.granted_generation, coalesce(v_spec.observed_generation::text, 'none'),
                              coalesce(v_previous, '')));
    ELSIF v_grant.exposure IS NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s acknowledged generation %s without saying whether it exposed the device (a bcd older than this control plane)',
                              v_node, v_spec.observed_generation));
    ELSIF v_grant.exposure = 'failed' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'failed', 'reason', coalesce(v_grant.reason, 'the node cannot expose the device'));
    ELSIF v_grant.exposure = 'pending' THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason', coalesce(v_grant.reason, 'the node is preparing the device'));
    ELSIF v_previous IS NOT NULL THEN
        RETURN pg_catalog.jsonb_build_object('state', 'waiting_for_node', 'reason',
            pg_catalog.format('node %s (%s) has not confirmed that the GPU is no longer used: a process it could not stop is still in use there%s',
                              v_node, v_heard, v_previous));
    END IF;
    RETURN pg_catalog.jsonb_build_object('state', 'ready', 'reason', NULL);
END
$function$;

CREATE OR REPLACE FUNCTION compute.instance_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instance_changed() IS 'Refresh the node''s spec and emit an event when an instance''s state or generation changed.';

CREATE OR REPLACE FUNCTION compute.instance_document(p_instance_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instance_document(uuid) IS 'An instance as the API answers it.';

CREATE OR REPLACE FUNCTION compute.instance_gpus(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('device_uuid', d.uuid, 'pci_bus_id', d.pci_bus_id)
                                         ORDER BY d.pci_bus_id), '[]')
      FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
     WHERE b.reservation_id = p_reservation_id AND b.state IN ('provisional', 'active');
$function$;

COMMENT ON FUNCTION compute.instance_gpus(uuid) IS 'The GPUs (uuid, PCI bus id from the inventory) an instance''s live bookings hold.';

CREATE OR REPLACE FUNCTION compute.instance_lock(p_instance_id uuid)
 RETURNS compute.instances
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_instance compute.instances;
BEGIN
    SELECT * INTO v_instance FROM compute.instances AS i WHERE i.instance_id = p_instance_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no instance %s', p_instance_id), 'List the tenant''s instances (instances.list).');
    END IF;
    RETURN v_instance;
END
$function$;

COMMENT ON FUNCTION compute.instance_lock(uuid) IS 'The instance row, locked FOR UPDATE; NOT_FOUND when there is none.';

CREATE OR REPLACE FUNCTION compute.instance_power(p_instance_id uuid, p_verb text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instance_power(uuid,text) IS 'start (stopped -> running), stop (running -> stopped), reboot (running): a new generation for the node.';

CREATE OR REPLACE FUNCTION compute.instance_prepare(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instance_prepare(uuid,jsonb) IS 'instances.create, before the decision: book the GPUs provisionally and write the pending instance.';

CREATE OR REPLACE FUNCTION compute.instance_state_guard()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instance_state_guard() IS 'Refuse an instance state change that is not a row of compute.instance_transitions.';

CREATE OR REPLACE FUNCTION compute.instances_observed(p_node_id uuid, p_instances jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.instances_observed(uuid,jsonb) IS 'A node''s verified report of its domains: observed generation, running, or failed (a bad image fails that instance only).';

CREATE OR REPLACE FUNCTION compute.instances_settle(p_node_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
       AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                        WHERE b.reservation_id = i.reservation_id AND b.state = 'active' AND b.during @> compute.compute_now());
    -- The node applied a spec without it: its domain and disk are gone.
    UPDATE compute.instances AS i SET state = 'deleted'
     WHERE i.node_id = p_node_id AND i.state = 'deleting' AND i.removed_generation <= v_spec.observed_generation;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$function$;

COMMENT ON FUNCTION compute.instances_settle(uuid) IS 'Instances whose booking ended become deleting; deleted once the node acknowledged a spec without them.';

CREATE OR REPLACE FUNCTION compute.instances_spec_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM compute.instances_settle(NEW.node_id);
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.instances_spec_changed() IS 'A node''s spec or its acknowledgement moved: settle its instances.';

CREATE OR REPLACE FUNCTION compute.node_report_apply(p_report_id bigint, p_public_key bytea)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now; a
    -- MIG atom with the UUID of the MIG device it is, which the daemon checks against its own
    -- inventory with the profile and placement (a null cdi_name: not exposed, a condition).
    -- Each booking is named by its id: the node reports per booking whether it exposed it (Ready
    -- means usable, compute.node_observed). The withdrawal policy says how long processes still
    -- using a GPU or MIG instance no booking grants may take to stop before the node kills them.
    -- And per present GPU, the layout valid now and since when; for a MIG-capable GPU the MIG mode
    -- and GPU instances (profile@placement) it must have, which the daemon converges (issue 13).
    RETURN pg_catalog.jsonb_build_object('node_id', p_node_id,
        'devices', (SELECT coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until, 'booking_id', x.booking_id)
                       ORDER BY x.index, x.placement, x.slot), '[]')
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until, b.booking_id,
                           CASE WHEN a.kind = 'mig' THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END
                               AS mig_uuid
                      FROM compute.bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                      JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> v_now
                       AND r.instance_kind <> 'vps'
                    OFFSET 0) AS x),  -- OFFSET 0: the subquery stays one, so mig_uuid is computed once per row
        'gpus', (SELECT coalesce(pg_catalog.jsonb_agg(
                    pg_catalog.jsonb_build_object('uuid', d.uuid, 'index', d.index, 'layout', l.layout, 'since', l.since,
                        'mig', CASE WHEN d.mig_supported THEN pg_catalog.jsonb_build_object(
                                   'mode', CASE WHEN l.layout LIKE 'mig:%' THEN 'enabled' ELSE 'disabled' END,
                                   'instances', CASE WHEN l.layout LIKE 'mig:%' THEN
                                       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                   'profile', pg_catalog.split_part(i, '@', 1),
                                                   'placement', pg_catalog.split_part(i, '@', 2)::integer))
                                          FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.substr(l.layout, 5), ',')) AS i)
                                       ELSE '[]'::jsonb END) END)
                    ORDER BY d.index), '[]')
              FROM compute.devices AS d
              CROSS JOIN LATERAL compute.device_layout_at(d.device_id, v_now) AS l
             WHERE d.node_id = p_node_id AND d.present
               AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
                                WHERE b.device_id = d.device_id AND b.state = 'active' AND b.during @> v_now AND r.instance_kind = 'vps')),
        'withdrawal', pg_catalog.jsonb_build_object('grace_seconds', compute.limit('withdrawal_grace_seconds')))
        -- The VMs it must run (sql/700_instances.sql), only when there are any; their GPUs are passed
        -- through, never in "devices" (hence never in the CDI file, nor granted) nor in "gpus" (no
        -- MIG convergence touches a GPU a VM holds).
        || (SELECT CASE WHEN v.instances <> '[]' THEN pg_catalog.jsonb_build_object('instances', v.instances) ELSE '{}' END
              FROM (SELECT compute.node_spec_instances(p_node_id) AS instances) AS v);
END
$function$;

COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation (by booking), the withdrawal policy, each GPU''s layout (MIG mode and instances) but those a VM holds, and the VMs it must run.';

CREATE OR REPLACE FUNCTION compute.node_spec_instances(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    -- Instances whose booking holds now and that did not fail: what the node must run (or keep stopped).
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'instance_id', i.instance_id, 'domain', 'bc-' || i.instance_id, 'generation', i.generation,
               'power', CASE WHEN i.state = 'stopped' THEN 'stopped' ELSE 'running' END, 'reboots', i.reboots,
               'image', i.image, 'vcpus', i.vcpus, 'memory_mib', i.memory_mib, 'disk_gib', i.disk_gib,
               'ssh_keys', pg_catalog.to_jsonb(i.ssh_keys), 'gpus', compute.instance_gpus(i.reservation_id))
               ORDER BY i.instance_id), '[]')
      FROM compute.instances AS i
     WHERE i.node_id = p_node_id AND i.state IN ('provisioning', 'running', 'stopped')
       AND EXISTS (SELECT 1 FROM compute.bookings AS b
                    WHERE b.reservation_id = i.reservation_id AND b.state = 'active' AND b.during @> compute.compute_now());
$function$;

COMMENT ON FUNCTION compute.node_spec_instances(uuid) IS 'The instances a node must run now (spec key "instances").';

CREATE OR REPLACE FUNCTION compute.offering_json(p_offering compute.offerings)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('offering_id', p_offering.offering_id, 'pool_id', p_offering.pool_id,
        'shape', p_offering.shape, 'max_count', p_offering.max_count,
        'max_duration_seconds', extract(epoch FROM p_offering.max_duration)::bigint, 'created_at', p_offering.created_at)
        || CASE WHEN p_offering.instance_kind <> 'devices' THEN pg_catalog.jsonb_build_object('instance_kind', p_offering.instance_kind,
               'vcpus_per_atom', p_offering.vcpus_per_atom, 'memory_mib_per_atom', p_offering.memory_mib_per_atom) ELSE '{}' END;
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_extend_check(p_reservation compute.reservations, p_new_end timestamp with time zone, p_expected_end timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
    v_max interval;
BEGIN
    -- What an extension needs besides free atoms and quota: api.prepare asks it before the IAM
    -- decision (on the row as it reads), compute.reservation_extend again under the row lock.
    -- With expected_end, the change applies only to the end the caller saw (compare and set), so
    -- two clients extending at once cannot undo each other unknowingly.
    IF p_expected_end IS NOT NULL AND upper(p_reservation.during) IS DISTINCT FROM p_expected_end THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT',
            pg_catalog.format('reservation %s ends at %s, not %s', p_reservation.reservation_id, upper(p_reservation.during), p_expected_end),
            'Someone changed it meanwhile: read it again (reservations.get) and decide on its current end.');
    END IF;
    IF p_reservation.state NOT IN ('provisional', 'active') OR upper(p_reservation.during) <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('reservation %s has ended', p_reservation.reservation_id),
            'Reserve again for a new window.');
    END IF;
    IF p_new_end IS NULL OR p_new_end <= greatest(lower(p_reservation.during), v_now) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the new end must come after the start and after now',
            'To end a reservation now, release it.');
    END IF;
    SELECT least(o.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') INTO v_max
      FROM compute.offerings AS o
     WHERE o.pool_id = p_reservation.pool_id AND o.shape = p_reservation.shape AND o.instance_kind = p_reservation.instance_kind;
    IF p_new_end - lower(p_reservation.during) > coalesce(v_max, interval '0') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the extended window is too long', pg_catalog.format('Windows of this offering last at most %s.', v_max));
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION compute.reserve(p_request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
-- Lock order: the idempotency key (unique index), quota rows, devices (SKIP LOCKED, in compute.place).
DECLARE
    v_now        timestamptz := compute.compute_now();
    v_tenant_id  uuid;
    v_project_id uuid;
    v_pool_id    uuid;
    v_pool       compute.pools;
    v_offering   compute.offerings;
    v_shape      text;
    v_count      integer;
    v_start      timestamptz;
    v_end        timestamptz;
    v_same_node  boolean;
    v_hold       integer;
    v_key        text;
    v_hash       text;
    v_during     tstzrange;
    v_id         uuid := pg_catalog.gen_random_uuid();
    v_replay     jsonb;
    v_atoms      uuid[];
    v_fraction   numeric;
    v_kind       text;
BEGIN
    -- 1. The request's fields, each of its type (nothing here depends on the time or on the fleet).
    IF p_request IS NULL OR pg_catalog.jsonb_typeof(p_request) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a reservation request is a JSON object', 'See docs/architecture.md §17 for its fields.');
    END IF;
    v_tenant_id := compute.request_field(p_request, 'tenant_id', 'uuid', true) #>> '{}';
    v_project_id := compute.request_field(p_request, 'project_id', 'uuid', false) #>> '{}';
    v_pool_id := compute.request_field(p_request, 'pool_id', 'uuid', true) #>> '{}';
    v_shape := compute.request_field(p_request, 'shape', 'string', true) #>> '{}';
    v_count := coalesce(compute.request_field(p_request, 'count', 'integer', false)::integer, 1);
    v_start := compute.request_timestamp(p_request, 'start', false);
    v_end := compute.request_timestamp(p_request, 'end', true);
    v_same_node := coalesce((compute.request_field(p_request, 'same_node', 'boolean', false))::boolean, false);
    v_hold := compute.request_field(p_request, 'hold_seconds', 'integer', false)::integer;
    v_key := compute.request_field(p_request, 'idempotency_key', 'string', false) #>> '{}';
    -- The offering's instance kind: devices unless an instance flow books (instances.create: vps).
    v_kind := coalesce(compute.request_field(p_request, 'instance_kind', 'string', false) #>> '{}', 'devices');
    IF length(v_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'idempotency_key has 1 to 200 characters', 'Use 1 to 200 characters, e.g. a uuid.');
    END IF;

    -- 2. Idempotency first: a retry gets the stored answer, even once its window has started or ended.
    v_hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to((pg_catalog.jsonb_build_object(
        'tenant_id', v_tenant_id, 'project_id', v_project_id, 'pool_id', v_pool_id, 'shape', v_shape, 'count', v_count,
        'start', extract(epoch FROM v_start), 'end', extract(epoch FROM v_end),
        'same_node', v_same_node, 'hold_seconds', v_hold)
        || CASE WHEN v_kind <> 'devices' THEN pg_catalog.jsonb_build_object('instance_kind', v_kind) ELSE '{}' END)::text, 'UTF8')), 'hex');
    v_replay := compute.reservation_replay(v_tenant_id, v_key, v_hash);
    IF v_replay IS NOT NULL THEN
        RETURN v_replay;
    END IF;

    -- 3. The pool (the tenant's: another tenant's pool reads as missing; an operator's site has no
    --    tenant and is the operator's to book), its offering, and the window against now.
    v_pool := compute.pool_get(v_pool_id);
    IF (SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = v_pool.site_id) <> v_tenant_id THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', v_pool_id),
            'List the pools in ops.pool_capacity, or create one with compute.pool_create.');
    END IF;
    SELECT * INTO v_offering FROM compute.offerings AS o
     WHERE o.pool_id = v_pool.pool_id AND o.shape = v_shape AND o.instance_kind = v_kind;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('pool %s does not offer %s', v_pool.name, v_shape),
            coalesce('Shapes offered: ' || (SELECT pg_catalog.string_agg(o.shape, ', ' ORDER BY o.shape) FROM compute.offerings AS o
                                             WHERE o.pool_id = v_pool.pool_id AND o.instance_kind = v_kind) || '.',
                     'This pool offers nothing yet.'));
    END IF;
    IF v_count < 1 OR v_count > least(v_offering.max_count, compute.limit('atoms_per_reservation')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('count %s is out of range', v_count),
            pg_catalog.format('Ask for 1 to %s atoms of %s.', least(v_offering.max_count, compute.limit('atoms_per_reservation')), v_shape));
    END IF;
    v_start := coalesce(v_start, v_now);
    IF v_start < v_now - interval '1 minute' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('start %s is in the past', v_start),
            'Omit start (or pass null) to begin now.');
    END IF;
    v_start := greatest(v_start, v_now);  -- a start up to a minute in the past (clock skew) means now
    IF v_end <= v_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'end must come after start', 'Pass an end later than the start (or than now).');
    END IF;
    IF v_end - v_start > least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('a window of %s is too long', v_end - v_start),
            pg_catalog.format('Ask for at most %s.', least(v_offering.max_duration, compute.limit('reservation_window_seconds') * interval '1 second')));
    END IF;
    IF v_hold IS NOT NULL AND (v_hold < 1 OR v_hold > compute.limit('hold_seconds_max')) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('hold_seconds %s is out of range', v_hold),
            pg_catalog.format('Use 1 to %s seconds, or omit it for no lease.', compute.limit('hold_seconds_max')));
    END IF;
    PERFORM compute.project_check(v_tenant_id, v_project_id);
    PERFORM compute.tenant_ensure(v_tenant_id);
    v_during := tstzrange(v_start, v_end);

    -- 4. Claim the key by inserting the reservation; a concurrent holder of the same key makes us
    --    wait for its commit, then we replay its answer (or report the mismatch).
    INSERT INTO compute.reservations (reservation_id, tenant_id, project_id, site_id, pool_id, shape, count, during, same_node,
                                      state, expires_at, hold_seconds, hold_until, idempotency_key, request_hash, created_at, instance_kind)
    VALUES (v_id, v_tenant_id, v_project_id, v_pool.site_id, v_pool.pool_id, v_shape, v_count, v_during, v_same_node,
            'provisional', v_now + compute.limit('provisional_seconds') * interval '1 second', v_hold,
            v_now + v_hold * interval '1 second', v_key, v_hash, v_now, v_kind)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN compute.reservation_replay(v_tenant_id, v_key, v_hash);
    END IF;

    -- 5. Quota rows are locked before any device (lock order); counted once the atoms are known.
    --    Placement checked before booking, so an exclusion violation or a deadlock here is a race
    --    lost to a concurrent booking: CAPACITY_CONFLICT, as the contract names it.
    BEGIN
        PERFORM 1 FROM compute.quotas AS q
         WHERE q.tenant_id = v_tenant_id AND q.pool_id = v_pool.pool_id AND (q.project_id IS NULL OR q.project_id = v_project_id)
         ORDER BY q.quota_id FOR UPDATE;
        v_atoms := compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node);
        INSERT INTO compute.bookings (reservation_id, tenant_id, project_id, site_id, pool_id, node_id, device_id, atom_id,
                                      slices, shares, gpu_fraction, during, state)
        SELECT v_id, v_tenant_id, v_project_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
               a.slices, a.shares, a.gpu_fraction, v_during, 'provisional'
          FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    EXCEPTION WHEN exclusion_violation OR deadlock_detected THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('%s x %s in pool %s were taken by a concurrent reservation', v_count, v_shape, v_pool.name),
            'Try again: placement looks for other free atoms; compute.capacity_earliest finds free windows.');
    END;
    SELECT sum(a.gpu_fraction) INTO v_fraction FROM compute.atoms AS a WHERE a.atom_id = ANY (v_atoms);
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, v_count, v_fraction, v_id);
    RETURN compute.reservation_document(v_id);
END
$function$;

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

COMMENT ON TABLE compute.instance_transitions IS 'The legal moves of an instance''s state; every other is refused.';

COMMENT ON TABLE compute.instances IS 'A VPS: a VM on the node of its reservation''s GPUs, alive while its booking holds.';

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('instance_ssh_keys',                16, 'count',   'SSH public keys one instance may take.'),
    ('instance_disk_gib_max',          4096, 'count',   'Largest root disk of one instance, in GiB.');

INSERT INTO compute.instance_transitions (from_state, to_state) VALUES
    ('pending', 'provisioning'), ('pending', 'failed'),
    ('provisioning', 'running'), ('provisioning', 'failed'), ('provisioning', 'deleting'),
    ('running', 'stopped'), ('stopped', 'running'),
    ('running', 'failed'), ('stopped', 'failed'),
    ('running', 'deleting'), ('stopped', 'deleting'), ('failed', 'deleting'),
    ('deleting', 'deleted');

CREATE TRIGGER instances_state_guard BEFORE UPDATE ON compute.instances
    FOR EACH ROW EXECUTE FUNCTION compute.instance_state_guard();

CREATE TRIGGER node_specs_instances AFTER UPDATE OF generation, observed_generation ON compute.node_specs
    FOR EACH ROW EXECUTE FUNCTION compute.instances_spec_changed();

CREATE TRIGGER instances_changed AFTER INSERT OR UPDATE ON compute.instances
    FOR EACH ROW EXECUTE FUNCTION compute.instance_changed();

CREATE VIEW ops.instances AS
    SELECT i.instance_id, 'bc-' || i.instance_id AS domain, i.tenant_id, i.project_id, p.name AS pool, n.name AS node, i.state,
           i.image, i.vcpus, i.memory_mib, i.disk_gib,
           (SELECT pg_catalog.array_agg(d.pci_bus_id ORDER BY d.pci_bus_id)
              FROM compute.bookings AS b JOIN compute.devices AS d ON d.device_id = b.device_id
             WHERE b.reservation_id = i.reservation_id AND b.state IN ('provisional', 'active')) AS gpus_pci,
           i.reservation_id, upper(r.during) AS booked_until, i.generation, i.observed_generation,
           i.observed_generation IS NOT DISTINCT FROM i.generation AS converged, i.conditions, i.failure, i.created_at, i.changed_at
      FROM compute.instances AS i
      JOIN compute.nodes AS n ON n.node_id = i.node_id
      JOIN compute.pools AS p ON p.pool_id = i.pool_id
      JOIN compute.reservations AS r ON r.reservation_id = i.reservation_id;

COMMENT ON VIEW ops.instances IS 'Every VPS: tenant, node, state, size, the PCI addresses of its GPUs, booked until, converged or not, conditions.';

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

UPDATE api.methods SET summary = 'Offer a shape in a pool (or change the offer''s limits); a vps offer states vCPUs and memory per GPU.',
    input_schema = '{"type":"object","properties":{"pool_id":{"$piece":"uuid"},"shape":{"$piece":"shape"},"max_count":{"type":"integer","minimum":1,"x-limit":{"maximum":"atoms_per_reservation"}},"max_duration_seconds":{"type":"integer","minimum":1,"x-limit":{"maximum":"reservation_window_seconds"}},"instance_kind":{"type":"string","enum":["devices","bare_metal","vps"]},"vcpus_per_atom":{"type":"integer","minimum":1,"maximum":1024},"memory_mib_per_atom":{"type":"integer","minimum":1,"maximum":16777216},"idempotency_key":{"$piece":"idempotency_key"}},"required":["pool_id","shape","max_count","max_duration_seconds"],"additionalProperties":false}'
 WHERE method = 'offerings.create';

COMMIT;
