-- Deploy better_compute:ops_names_devices_comments to pg
-- ops.*: an ambiguous node name is refused naming each node (site/name or the id picks one); not-found errors name the GPU and the booking; ops.devices; column comments on the views operators read
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION ops.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.booking_id = p_booking_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no booking %s', p_booking_id),
            'ops.readiness lists the bookings by id, with their reservation and node.');
    END IF;
    RETURN compute.booking_readiness(p_booking_id);
END
$function$;

CREATE OR REPLACE FUNCTION ops.device_set_layout(p_device_uuid text, p_layout text, p_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_device_id uuid := (SELECT d.device_id FROM compute.devices AS d WHERE d.uuid = p_device_uuid);
BEGIN
    IF v_device_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no GPU %L', p_device_uuid),
            'Name a GPU by its uuid (GPU-…), as ops.devices lists them.');
    END IF;
    RETURN compute.device_set_layout(v_device_id, p_layout, p_at);
END
$function$;

CREATE OR REPLACE FUNCTION ops.node_id(p_node text)
 RETURNS uuid
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_node_ids uuid[];
    v_names    text[];
BEGIN
    -- A node by its id, its site/name, or its bare name. Names are unique per site only (two tenants
    -- may each have a node-1): a bare name that several nodes share is refused, naming each one, so
    -- that an operator never flags, fences or drains another tenant's node by accident.
    SELECT pg_catalog.array_agg(n.node_id ORDER BY s.name, n.node_id), pg_catalog.array_agg(s.name || '/' || n.name ORDER BY s.name, n.node_id)
      INTO v_node_ids, v_names
      FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
     WHERE n.node_id::text = p_node OR n.name = p_node OR s.name || '/' || n.name = p_node;
    IF v_node_ids IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %L', p_node),
            'Name a node by its id, site/name or name (see ops.nodes).');
    END IF;
    IF pg_catalog.cardinality(v_node_ids) > 1 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT',
            pg_catalog.format('node name %L is ambiguous: %s nodes have it (%s)', p_node, pg_catalog.cardinality(v_node_ids),
                              pg_catalog.array_to_string(v_names, ', ')),
            pg_catalog.format('Name the node as site/name (%s) or by its id (see ops.nodes).', pg_catalog.array_to_string(v_names, ', ')));
    END IF;
    RETURN v_node_ids[1];
END
$function$;

COMMENT ON FUNCTION ops.node_id(text) IS 'A node''s id from its id, site/name or name; a name several sites use is refused (INVALID_ARGUMENT naming each).';

COMMENT ON COLUMN ops.atom_holders.atom_id IS 'The atom: what a booking holds.';

COMMENT ON COLUMN ops.atom_holders.device_index IS 'The GPU''s index on its node.';

COMMENT ON COLUMN ops.atom_holders.device_uuid IS 'The GPU''s uuid (GPU-…).';

COMMENT ON COLUMN ops.atom_holders.held_until IS 'When that booking ends.';

COMMENT ON COLUMN ops.atom_holders.holder_reservation IS 'The reservation holding the atom, or an overlapping part of its GPU, now.';

COMMENT ON COLUMN ops.atom_holders.holder_tenant IS 'Its tenant.';

COMMENT ON COLUMN ops.atom_holders.layout IS 'The GPU''s current layout.';

COMMENT ON COLUMN ops.atom_holders.next_from IS 'When it starts.';

COMMENT ON COLUMN ops.atom_holders.next_reservation IS 'The next reservation to hold the atom.';

COMMENT ON COLUMN ops.atom_holders.next_tenant IS 'Its tenant.';

COMMENT ON COLUMN ops.atom_holders.node IS 'The node''s name.';

COMMENT ON COLUMN ops.atom_holders.placement IS 'A MIG instance''s start slice (NULL otherwise).';

COMMENT ON COLUMN ops.atom_holders.pool IS 'The pool''s name.';

COMMENT ON COLUMN ops.atom_holders.shape IS 'gpu, slot or mig:<profile>.';

COMMENT ON COLUMN ops.atom_holders.slot IS 'A time-slice slot''s number (NULL otherwise).';

COMMENT ON COLUMN ops.nodes.connected IS 'Whether a gateway session is open and heard within session_timeout_seconds (disconnected is not dead: nothing is released).';

COMMENT ON COLUMN ops.nodes.created_at IS 'When the node registered.';

COMMENT ON COLUMN ops.nodes.drain IS 'draining while a booking is live now on a draining node, then drained; NULL when not draining.';

COMMENT ON COLUMN ops.nodes.flag_details IS 'Per flag: who set it (by), why (reason), when (at) and when a drain completed.';

COMMENT ON COLUMN ops.nodes.flags IS 'Flags set on the node: cordoned, draining, quarantined (none: NULL).';

COMMENT ON COLUMN ops.nodes.gpu_conditions IS 'Each GPU condition: gpu_uuid, index, type, status, critical, reason, message, who set it, since, reported_at.';

COMMENT ON COLUMN ops.nodes.gpu_model IS 'The pool''s one GPU model.';

COMMENT ON COLUMN ops.nodes.gpus IS 'GPUs present in the last inventory.';

COMMENT ON COLUMN ops.nodes.gpus_unschedulable IS 'GPUs that a critical condition keeps out of placement.';

COMMENT ON COLUMN ops.nodes.inventory_at IS 'When the node last reported its inventory.';

COMMENT ON COLUMN ops.nodes.last_heard_seconds IS 'Seconds since the gateway last heard the node (NULL: never).';

COMMENT ON COLUMN ops.nodes.name IS 'The node''s name, unique within its site only: two sites may each have a node-1.';

COMMENT ON COLUMN ops.nodes.node_id IS 'The node''s id (what ops.node_* functions accept besides site/name).';

COMMENT ON COLUMN ops.nodes.pool IS 'The pool''s name.';

COMMENT ON COLUMN ops.nodes.site IS 'The site''s name.';

COMMENT ON COLUMN ops.pool_capacity.bookable IS 'Atoms on a present GPU of an unflagged node.';

COMMENT ON COLUMN ops.pool_capacity.cordoned IS 'Atoms on flagged (cordoned, draining, quarantined) nodes.';

COMMENT ON COLUMN ops.pool_capacity.gpu_model IS 'The pool''s GPU model.';

COMMENT ON COLUMN ops.pool_capacity.held_future IS 'Atoms with a booking that starts later.';

COMMENT ON COLUMN ops.pool_capacity.held_now IS 'Atoms a live booking holds now.';

COMMENT ON COLUMN ops.pool_capacity.pool IS 'The pool''s name.';

COMMENT ON COLUMN ops.pool_capacity.pool_id IS 'The pool''s id.';

COMMENT ON COLUMN ops.pool_capacity.shape IS 'The atom shape: gpu, slot or mig:<profile>.';

COMMENT ON COLUMN ops.pool_capacity.total IS 'Atoms of the shape valid now.';

COMMENT ON COLUMN ops.readiness.booking_id IS 'The booking (one atom of a reservation).';

COMMENT ON COLUMN ops.readiness.device_uuid IS 'The GPU''s uuid.';

COMMENT ON COLUMN ops.readiness.granted_generation IS 'The spec generation that grants the device to the node.';

COMMENT ON COLUMN ops.readiness.kind IS 'gpu, mig or slot.';

COMMENT ON COLUMN ops.readiness.node IS 'The node''s name.';

COMMENT ON COLUMN ops.readiness.node_id IS 'The node''s id.';

COMMENT ON COLUMN ops.readiness.observed_generation IS 'The spec generation the node last acknowledged.';

COMMENT ON COLUMN ops.readiness.placement IS 'A MIG instance''s start slice.';

COMMENT ON COLUMN ops.readiness.profile IS 'A MIG profile (NULL otherwise).';

COMMENT ON COLUMN ops.readiness.reason IS 'Why it waits or failed.';

COMMENT ON COLUMN ops.readiness.reservation_id IS 'Its reservation.';

COMMENT ON COLUMN ops.readiness.slot IS 'A time-slice slot.';

COMMENT ON COLUMN ops.readiness.state IS 'ready, waiting_for_node or failed.';

COMMENT ON COLUMN ops.readiness.tenant_id IS 'The tenant holding it.';

COMMENT ON COLUMN ops.usage.atom_seconds IS 'Atom-seconds reserved in it.';

COMMENT ON COLUMN ops.usage.gpu_hours IS 'gpu_seconds / 3600.';

COMMENT ON COLUMN ops.usage.gpu_seconds IS 'GPU-seconds: atom-seconds times each atom''s GPU fraction.';

COMMENT ON COLUMN ops.usage.ledger_key IS 'The ledger''s idempotency key for the window.';

COMMENT ON COLUMN ops.usage.pool_id IS 'The pool.';

COMMENT ON COLUMN ops.usage.project_id IS 'The project (NULL: none).';

COMMENT ON COLUMN ops.usage.reservation_id IS 'The reservation.';

COMMENT ON COLUMN ops.usage.sent_at IS 'When the ledger took it (NULL: not yet).';

COMMENT ON COLUMN ops.usage.shape IS 'The shape reserved.';

COMMENT ON COLUMN ops.usage.tenant_id IS 'The tenant.';

COMMENT ON COLUMN ops.usage.window_start IS 'The hour the window covers.';

COMMENT ON COLUMN ops.webhook_dead_letters.attempts IS 'Attempts it had.';

COMMENT ON COLUMN ops.webhook_dead_letters.created_at IS 'When the delivery was queued.';

COMMENT ON COLUMN ops.webhook_dead_letters.delivery_id IS 'The delivery: ops.webhook_replay(delivery_id) sends it again.';

COMMENT ON COLUMN ops.webhook_dead_letters.event_id IS 'The outbox event.';

COMMENT ON COLUMN ops.webhook_dead_letters.event_type IS 'The event''s type.';

COMMENT ON COLUMN ops.webhook_dead_letters.last_error IS 'The last failure.';

COMMENT ON COLUMN ops.webhook_dead_letters.last_status IS 'The last HTTP status (NULL: no answer).';

COMMENT ON COLUMN ops.webhook_dead_letters.tenant_id IS 'The webhook''s tenant.';

COMMENT ON COLUMN ops.webhook_dead_letters.url IS 'Where it was sent.';

COMMENT ON COLUMN ops.withdrawals.booking_id IS 'The ended booking.';

COMMENT ON COLUMN ops.withdrawals.device_uuid IS 'The GPU''s uuid.';

COMMENT ON COLUMN ops.withdrawals.fenced_at IS 'When.';

COMMENT ON COLUMN ops.withdrawals.fenced_by IS 'Who fenced the node out of band (ops.node_fence).';

COMMENT ON COLUMN ops.withdrawals.fenced_reason IS 'Why.';

COMMENT ON COLUMN ops.withdrawals.node IS 'The node''s name.';

COMMENT ON COLUMN ops.withdrawals.node_id IS 'The node''s id.';

COMMENT ON COLUMN ops.withdrawals.observed_generation IS 'The spec generation the node last acknowledged.';

COMMENT ON COLUMN ops.withdrawals.reservation_id IS 'Its reservation.';

COMMENT ON COLUMN ops.withdrawals.withdrawal_acked_generation IS 'The generation at which the node confirmed it (NULL here: not yet).';

COMMENT ON COLUMN ops.withdrawals.withdrawn_generation IS 'The spec generation that withdraws the device.';

COMMENT ON COLUMN ops.work.attempts IS 'Attempts so far.';

COMMENT ON COLUMN ops.work.key IS 'What it is about; one live item per kind and key.';

COMMENT ON COLUMN ops.work.kind IS 'What it does (webhook.deliver, …).';

COMMENT ON COLUMN ops.work.last_error IS 'The last failure.';

COMMENT ON COLUMN ops.work.lease_epoch IS 'The fencing token of that lease.';

COMMENT ON COLUMN ops.work.lease_expires_at IS 'When the lease lapses unless renewed.';

COMMENT ON COLUMN ops.work.lease_owner IS 'The worker holding it.';

COMMENT ON COLUMN ops.work.max_attempts IS 'When attempts reach it, the item is dead.';

COMMENT ON COLUMN ops.work.priority IS 'Higher runs first.';

COMMENT ON COLUMN ops.work.repoke IS 'Whether it runs again after the current run.';

COMMENT ON COLUMN ops.work.run_at IS 'Not before this time.';

COMMENT ON COLUMN ops.work.state IS 'pending, running or dead.';

COMMENT ON COLUMN ops.work.updated_at IS 'Last change.';

COMMENT ON COLUMN ops.work.work_id IS 'The work item.';

COMMENT ON COLUMN ops.work_dead.attempts IS 'Attempts it had.';

COMMENT ON COLUMN ops.work_dead.died_at IS 'When it gave up.';

COMMENT ON COLUMN ops.work_dead.key IS 'What it is about.';

COMMENT ON COLUMN ops.work_dead.kind IS 'What it does.';

COMMENT ON COLUMN ops.work_dead.last_error IS 'The last failure.';

COMMENT ON COLUMN ops.work_dead.work_id IS 'The item: ops.work_retry(work_id) queues it again.';

-- By hand (the tool lists a new view as such): ops.devices, its comments; bc_operator reads it by
-- ops' default privileges.
CREATE VIEW ops.devices AS
    WITH now_ AS (SELECT ops.now() AS t)
    SELECT d.uuid AS device_uuid, s.name AS site, p.name AS pool, n.name AS node, d.index, d.model, d.memory_mib, d.layout,
           d.layout_since, d.present,
           (SELECT count(*) FROM compute.atoms AS a WHERE a.device_id = d.device_id AND a.valid @> now_.t) AS atoms,
           (SELECT count(*) FROM compute.atoms AS a
             WHERE a.device_id = d.device_id AND a.valid @> now_.t
               AND EXISTS (SELECT 1 FROM compute.bookings AS b WHERE b.atom_id = a.atom_id AND b.state IN ('provisional', 'active')
                                                                AND b.during @> now_.t)) AS atoms_held_now,
           (SELECT pg_catalog.array_agg(c.type ORDER BY c.type) FROM compute.device_conditions AS c
             WHERE c.device_id = d.device_id AND c.critical) AS critical_conditions,
           d.pci_bus_id, d.numa_node, d.nvlink_peers, d.mig_supported, d.device_id, d.node_id, n.pool_id, d.site_id
      FROM now_, compute.devices AS d
      JOIN compute.nodes AS n ON n.node_id = d.node_id
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = d.site_id;
COMMENT ON VIEW ops.devices IS 'Every GPU: where it is (site, pool, node, index), what it is, its layout, whether it is present, its atoms valid now and how many are held, and the critical conditions that keep it out of placement.';
COMMENT ON COLUMN ops.devices.device_uuid IS 'The GPU''s uuid (GPU-…): what ops.device_set_layout takes.';
COMMENT ON COLUMN ops.devices.site IS 'The site''s name.';
COMMENT ON COLUMN ops.devices.pool IS 'The pool''s name.';
COMMENT ON COLUMN ops.devices.node IS 'The node''s name.';
COMMENT ON COLUMN ops.devices.index IS 'The GPU''s index on its node (nvidia-smi''s).';
COMMENT ON COLUMN ops.devices.model IS 'The GPU model.';
COMMENT ON COLUMN ops.devices.memory_mib IS 'GPU memory in MiB.';
COMMENT ON COLUMN ops.devices.layout IS 'whole, timeslice:N or mig:profile@placement,…';
COMMENT ON COLUMN ops.devices.layout_since IS 'Since when that layout holds.';
COMMENT ON COLUMN ops.devices.present IS 'Whether the last inventory reported the GPU (absent: a condition, bookings are kept).';
COMMENT ON COLUMN ops.devices.atoms IS 'Bookable units of the GPU valid now.';
COMMENT ON COLUMN ops.devices.atoms_held_now IS 'Of those, how many a live booking holds now.';
COMMENT ON COLUMN ops.devices.critical_conditions IS 'Types of critical conditions that keep the GPU out of placement (NULL: none).';
COMMENT ON COLUMN ops.devices.pci_bus_id IS 'The PCI bus id.';
COMMENT ON COLUMN ops.devices.numa_node IS 'The NUMA node (NULL: unknown).';
COMMENT ON COLUMN ops.devices.nvlink_peers IS 'Uuids of the GPUs it has NVLink to.';
COMMENT ON COLUMN ops.devices.mig_supported IS 'Whether it can be partitioned with MIG.';
COMMENT ON COLUMN ops.devices.device_id IS 'The GPU''s id in the database.';
COMMENT ON COLUMN ops.devices.node_id IS 'Its node''s id.';
COMMENT ON COLUMN ops.devices.pool_id IS 'Its pool''s id.';
COMMENT ON COLUMN ops.devices.site_id IS 'Its site''s id.';

COMMIT;
