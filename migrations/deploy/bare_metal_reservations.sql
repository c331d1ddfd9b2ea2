-- Deploy better_compute:bare_metal_reservations to pg
-- Reservations of shape bare_metal book whole active machines; their end cleans the machine
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

-- By hand: offerings of shape bare_metal (whole machines, instance kind bare_metal only). A
-- bare_metal offering of an atom shape was never bookable (nothing booked instance kind bare_metal
-- until now) and cannot be: it goes.
DELETE FROM compute.offerings WHERE instance_kind = 'bare_metal' AND shape <> 'bare_metal';
ALTER TABLE compute.offerings DROP CONSTRAINT offerings_shape_check;
ALTER TABLE compute.offerings ADD CONSTRAINT offerings_shape_check
    CHECK (shape ~ '^(gpu|slot|mig:[0-9]+g\.[0-9]+gb(\+me)?|bare_metal)$');
ALTER TABLE compute.offerings ADD CONSTRAINT offerings_bare_metal_is_whole_machines
    CHECK ((shape = 'bare_metal') = (instance_kind = 'bare_metal'));
CREATE INDEX reservations_bare_metal_ended ON compute.reservations (upper(during))
    WHERE instance_kind = 'bare_metal' AND state IN ('active', 'released', 'expired');
UPDATE compute.api_schema_pieces
   SET schema = '{"type":"string","pattern":"^(gpu|slot|mig:[0-9]+g\\.[0-9]+gb(\\+me)?|bare_metal)$"}',
       description = 'An atom shape: gpu, slot or a MIG profile; bare_metal: whole machines.'
 WHERE name = 'shape';

CREATE OR REPLACE FUNCTION compute.api_capacity_earliest(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('start', e.start_at, 'end', e.end_at, 'reason', e.reason)
      FROM compute.capacity_earliest(compute.input_uuid(p_input, 'pool_id'), compute.api_capacity_shape(p_input),
                                     compute.input_integer(p_input, 'count'),
                                     compute.input_integer(p_input, 'duration_seconds') * interval '1 second',
                                     compute.request_timestamp(p_input, 'not_before', false)) AS e;
$function$;

CREATE OR REPLACE FUNCTION compute.api_capacity_free(p_tenant_id uuid, p_input jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('node_id', f.node_id, 'node', f.node_name,
                                                                       'free_atoms', f.free_atoms, 'atom_ids', f.atom_ids)
                                         ORDER BY f.node_name), '[]')
      FROM compute.capacity_free(compute.input_uuid(p_input, 'pool_id'), compute.api_capacity_shape(p_input),
                                 coalesce(compute.request_timestamp(p_input, 'start', false), compute.compute_now()),
                                 compute.request_timestamp(p_input, 'end', true)) AS f;
$function$;

CREATE OR REPLACE FUNCTION compute.api_capacity_shape(p_input jsonb)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- Capacity is counted in atoms of one shape; whole machines are not counted yet (fail closed, P11).
    IF compute.input_text(p_input, 'shape') = 'bare_metal' THEN
        PERFORM compute.raise_error('UNSUPPORTED', 'capacity of whole machines (shape bare_metal) is not counted yet',
            'Reserve shape bare_metal (a CAPACITY_CONFLICT says how many machines are free), or ask for the shape gpu.');
    END IF;
    RETURN compute.input_text(p_input, 'shape');
END
$function$;

COMMENT ON FUNCTION compute.api_capacity_shape(jsonb) IS 'The shape capacity.free and capacity.earliest count: an atom shape (bare_metal is UNSUPPORTED).';

CREATE OR REPLACE FUNCTION compute.api_offerings_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_offering_id uuid;
    v_kind        text := coalesce(compute.input_text(p_input, 'instance_kind', false), 'devices');
BEGIN
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

CREATE OR REPLACE FUNCTION compute.machine_atoms_free(p_node_id uuid, p_during tstzrange)
 RETURNS uuid[]
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- Every atom of the node during the window, when each is schedulable for all of it (no layout
    -- change within it, no flag on the node, present GPUs without a critical condition) and free;
    -- NULL otherwise.
    RETURN (SELECT CASE WHEN count(*) > 0 AND bool_and(compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during))
                        THEN pg_catalog.array_agg(a.atom_id ORDER BY a.device_index, a.slices, a.slot) END
              FROM compute.atoms AS a
             WHERE a.node_id = p_node_id AND a.valid && p_during);
END
$function$;

COMMENT ON FUNCTION compute.machine_atoms_free(uuid,tstzrange) IS 'All the atoms of a node during a window when every one is schedulable and free for all of it; else NULL.';

CREATE OR REPLACE FUNCTION compute.machine_operator_move(p_machine text, p_event text, p_reason text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_machine compute.machines := compute.machine_get(p_machine, true);
    v_holder  compute.reservations;
BEGIN
    IF p_event = 'release' THEN  -- a tenant's machine is cleaned when its reservation ends, not under it
        SELECT r.* INTO v_holder FROM compute.bookings AS b JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
         WHERE b.node_id = v_machine.node_id AND r.instance_kind = 'bare_metal' AND b.state IN ('provisional', 'active')
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
$function$;

CREATE OR REPLACE FUNCTION compute.machine_reconcile(p_machine_id uuid)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.machine_reconcile(uuid) IS 'Level-triggered: clean a machine whose bare_metal reservation ended, fire a passed deadline, take back an expired op, issue the next op, or finish the state.';

CREATE OR REPLACE FUNCTION compute.machine_reservation_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Released or expired now: the reconciler of its machines cleans them (a window that simply
    -- runs out changes no row: machines_sweep finds those).
    PERFORM compute.work_poke('machines.reconcile', m.machine_id::text)
       FROM compute.machines AS m
      WHERE m.node_id IN (SELECT b.node_id FROM compute.bookings AS b WHERE b.reservation_id = NEW.reservation_id);
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION compute.machine_reservation_ended(p_machine compute.machines)
 RETURNS uuid
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- A bare_metal reservation that held the machine's node and ended (released, expired or its
    -- window over) after the machine became active; NULL when none did.
    RETURN (SELECT r.reservation_id FROM compute.reservations AS r
             WHERE r.instance_kind = 'bare_metal' AND r.state IN ('active', 'released', 'expired')
               AND upper(r.during) <= compute.compute_now() AND upper(r.during) > p_machine.state_since
               AND EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.reservation_id = r.reservation_id AND b.node_id = p_machine.node_id AND b.state IN ('active', 'released'))
             ORDER BY upper(r.during) LIMIT 1);
END
$function$;

COMMENT ON FUNCTION compute.machine_reservation_ended(compute.machines) IS 'A bare_metal reservation of the machine that ended since it became active (it is to be cleaned), or NULL.';

CREATE OR REPLACE FUNCTION compute.machines_sweep()
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.machines_sweep() IS 'Poke the reconciler of every machine in a state that moves by itself (deadlines, lost agents, ended bare_metal reservations).';

CREATE OR REPLACE FUNCTION compute.offering_create(p_pool_id uuid, p_shape text, p_max_count integer, p_max_duration interval, p_instance_kind text DEFAULT 'devices'::text, p_offering_id uuid DEFAULT NULL::uuid)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_offering_id uuid;
BEGIN
    PERFORM compute.pool_get(p_pool_id);
    IF p_shape IS NULL OR p_shape !~ '^(gpu|slot|mig:[0-9]+g\.[0-9]+gb(\+me)?|bare_metal)$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid shape %L', p_shape),
            'Use gpu, slot, mig:<profile> (e.g. mig:3g.71gb), or bare_metal (whole machines).');
    END IF;
    IF (p_shape = 'bare_metal') IS DISTINCT FROM (p_instance_kind = 'bare_metal') THEN  -- a whole machine, its every atom
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'shape bare_metal is offered with instance_kind bare_metal, and only it',
            'Offer whole machines as shape bare_metal, instance_kind bare_metal; devices as gpu, slot or mig:<profile>.');
    END IF;
    IF p_max_count IS NULL OR p_max_count < 1 OR p_max_count > compute.limit('atoms_per_reservation') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_count %s is out of range', p_max_count),
            pg_catalog.format('Use 1 to %s (limit atoms_per_reservation).', compute.limit('atoms_per_reservation')));
    END IF;
    IF p_max_duration IS NULL OR p_max_duration <= interval '0'
       OR p_max_duration > compute.limit('reservation_window_seconds') * interval '1 second' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_duration %s is out of range', p_max_duration),
            pg_catalog.format('Use a positive interval up to %s seconds (limit reservation_window_seconds).',
                              compute.limit('reservation_window_seconds')));
    END IF;
    IF p_instance_kind IS NULL OR p_instance_kind NOT IN ('devices', 'bare_metal', 'vps') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid instance kind %L', p_instance_kind),
            'Use devices, bare_metal or vps.');
    END IF;
    INSERT INTO compute.offerings AS o (offering_id, pool_id, shape, instance_kind, max_count, max_duration, created_at)
    VALUES (coalesce(p_offering_id, pg_catalog.gen_random_uuid()), p_pool_id, p_shape, p_instance_kind, p_max_count, p_max_duration, compute.compute_now())
    ON CONFLICT (pool_id, shape, instance_kind)
        DO UPDATE SET max_count = EXCLUDED.max_count, max_duration = EXCLUDED.max_duration
    RETURNING o.offering_id INTO v_offering_id;
    RETURN v_offering_id;
END
$function$;

CREATE OR REPLACE FUNCTION compute.place_machines(p_pool_id uuid, p_count integer, p_during tstzrange)
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.place_machines(uuid,integer,tstzrange) IS 'Placement of shape bare_metal: every atom of p_count active machines wholly free for the window (CAPACITY_CONFLICT otherwise).';

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
    -- The offering's instance kind: devices unless an instance flow books (instances.create: vps);
    -- shape bare_metal books whole machines (compute.place_machines, sql/700_machines.sql).
    v_kind := coalesce(compute.request_field(p_request, 'instance_kind', 'string', false) #>> '{}',
                       CASE WHEN v_shape = 'bare_metal' THEN 'bare_metal' ELSE 'devices' END);
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
        v_atoms := CASE WHEN v_kind = 'bare_metal' THEN compute.place_machines(v_pool.pool_id, v_count, v_during)
                        ELSE compute.place(v_pool.pool_id, v_shape, v_count, v_during, v_same_node) END;
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
    PERFORM compute.quota_check(v_tenant_id, v_project_id, v_pool.pool_id, v_during, pg_catalog.cardinality(v_atoms), v_fraction, v_id);
    RETURN compute.reservation_document(v_id);
END
$function$;

-- By hand, after its function: a released or expired bare_metal reservation pokes its machines' reconciler.
CREATE TRIGGER reservations_bare_metal_ended AFTER UPDATE OF state ON compute.reservations
    FOR EACH ROW WHEN (NEW.instance_kind = 'bare_metal' AND OLD.state = 'active' AND NEW.state IN ('released', 'expired'))
    EXECUTE FUNCTION compute.machine_reservation_changed();

COMMIT;
