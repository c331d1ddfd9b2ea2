-- Revert better_compute:ops_names_devices_comments from pg
-- ops.*: an ambiguous node name is refused naming each node (site/name or the id picks one); not-found errors name the GPU and the booking; ops.devices; column comments on the views operators read
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION ops.booking_readiness(p_booking_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.booking_readiness(p_booking_id) $function$;

CREATE OR REPLACE FUNCTION ops.device_set_layout(p_device_uuid text, p_layout text, p_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.device_set_layout((SELECT d.device_id FROM compute.devices AS d WHERE d.uuid = p_device_uuid), p_layout, p_at) $function$;

CREATE OR REPLACE FUNCTION ops.node_id(p_node text)
 RETURNS uuid
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_node_id uuid;
BEGIN
    SELECT n.node_id INTO v_node_id FROM compute.nodes AS n
     WHERE n.node_id::text = p_node OR n.name = p_node;
    IF v_node_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %L', p_node), 'Name a node by its id or name (see ops.nodes).');
    END IF;
    RETURN v_node_id;
END
$function$;

COMMENT ON FUNCTION ops.node_id(text) IS 'A node''s id from its id or name.';

COMMENT ON COLUMN ops.atom_holders.atom_id IS NULL;

COMMENT ON COLUMN ops.atom_holders.device_index IS NULL;

COMMENT ON COLUMN ops.atom_holders.device_uuid IS NULL;

COMMENT ON COLUMN ops.atom_holders.held_until IS NULL;

COMMENT ON COLUMN ops.atom_holders.holder_reservation IS NULL;

COMMENT ON COLUMN ops.atom_holders.holder_tenant IS NULL;

COMMENT ON COLUMN ops.atom_holders.layout IS NULL;

COMMENT ON COLUMN ops.atom_holders.next_from IS NULL;

COMMENT ON COLUMN ops.atom_holders.next_reservation IS NULL;

COMMENT ON COLUMN ops.atom_holders.next_tenant IS NULL;

COMMENT ON COLUMN ops.atom_holders.node IS NULL;

COMMENT ON COLUMN ops.atom_holders.placement IS NULL;

COMMENT ON COLUMN ops.atom_holders.pool IS NULL;

COMMENT ON COLUMN ops.atom_holders.shape IS NULL;

COMMENT ON COLUMN ops.atom_holders.slot IS NULL;

COMMENT ON COLUMN ops.nodes.connected IS NULL;

COMMENT ON COLUMN ops.nodes.created_at IS NULL;

COMMENT ON COLUMN ops.nodes.drain IS NULL;

COMMENT ON COLUMN ops.nodes.flag_details IS NULL;

COMMENT ON COLUMN ops.nodes.flags IS NULL;

COMMENT ON COLUMN ops.nodes.gpu_conditions IS NULL;

COMMENT ON COLUMN ops.nodes.gpu_model IS NULL;

COMMENT ON COLUMN ops.nodes.gpus IS NULL;

COMMENT ON COLUMN ops.nodes.gpus_unschedulable IS NULL;

COMMENT ON COLUMN ops.nodes.inventory_at IS NULL;

COMMENT ON COLUMN ops.nodes.last_heard_seconds IS NULL;

COMMENT ON COLUMN ops.nodes.name IS NULL;

COMMENT ON COLUMN ops.nodes.node_id IS NULL;

COMMENT ON COLUMN ops.nodes.pool IS NULL;

COMMENT ON COLUMN ops.nodes.site IS NULL;

COMMENT ON COLUMN ops.pool_capacity.bookable IS NULL;

COMMENT ON COLUMN ops.pool_capacity.cordoned IS NULL;

COMMENT ON COLUMN ops.pool_capacity.gpu_model IS NULL;

COMMENT ON COLUMN ops.pool_capacity.held_future IS NULL;

COMMENT ON COLUMN ops.pool_capacity.held_now IS NULL;

COMMENT ON COLUMN ops.pool_capacity.pool IS NULL;

COMMENT ON COLUMN ops.pool_capacity.pool_id IS NULL;

COMMENT ON COLUMN ops.pool_capacity.shape IS NULL;

COMMENT ON COLUMN ops.pool_capacity.total IS NULL;

COMMENT ON COLUMN ops.readiness.booking_id IS NULL;

COMMENT ON COLUMN ops.readiness.device_uuid IS NULL;

COMMENT ON COLUMN ops.readiness.granted_generation IS NULL;

COMMENT ON COLUMN ops.readiness.kind IS NULL;

COMMENT ON COLUMN ops.readiness.node IS NULL;

COMMENT ON COLUMN ops.readiness.node_id IS NULL;

COMMENT ON COLUMN ops.readiness.observed_generation IS NULL;

COMMENT ON COLUMN ops.readiness.placement IS NULL;

COMMENT ON COLUMN ops.readiness.profile IS NULL;

COMMENT ON COLUMN ops.readiness.reason IS NULL;

COMMENT ON COLUMN ops.readiness.reservation_id IS NULL;

COMMENT ON COLUMN ops.readiness.slot IS NULL;

COMMENT ON COLUMN ops.readiness.state IS NULL;

COMMENT ON COLUMN ops.readiness.tenant_id IS NULL;

COMMENT ON COLUMN ops.usage.atom_seconds IS NULL;

COMMENT ON COLUMN ops.usage.gpu_hours IS NULL;

COMMENT ON COLUMN ops.usage.gpu_seconds IS NULL;

COMMENT ON COLUMN ops.usage.ledger_key IS NULL;

COMMENT ON COLUMN ops.usage.pool_id IS NULL;

COMMENT ON COLUMN ops.usage.project_id IS NULL;

COMMENT ON COLUMN ops.usage.reservation_id IS NULL;

COMMENT ON COLUMN ops.usage.sent_at IS NULL;

COMMENT ON COLUMN ops.usage.shape IS NULL;

COMMENT ON COLUMN ops.usage.tenant_id IS NULL;

COMMENT ON COLUMN ops.usage.window_start IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.attempts IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.created_at IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.delivery_id IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.event_id IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.event_type IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.last_error IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.last_status IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.tenant_id IS NULL;

COMMENT ON COLUMN ops.webhook_dead_letters.url IS NULL;

COMMENT ON COLUMN ops.withdrawals.booking_id IS NULL;

COMMENT ON COLUMN ops.withdrawals.device_uuid IS NULL;

COMMENT ON COLUMN ops.withdrawals.fenced_at IS NULL;

COMMENT ON COLUMN ops.withdrawals.fenced_by IS NULL;

COMMENT ON COLUMN ops.withdrawals.fenced_reason IS NULL;

COMMENT ON COLUMN ops.withdrawals.node IS NULL;

COMMENT ON COLUMN ops.withdrawals.node_id IS NULL;

COMMENT ON COLUMN ops.withdrawals.observed_generation IS NULL;

COMMENT ON COLUMN ops.withdrawals.reservation_id IS NULL;

COMMENT ON COLUMN ops.withdrawals.withdrawal_acked_generation IS NULL;

COMMENT ON COLUMN ops.withdrawals.withdrawn_generation IS NULL;

COMMENT ON COLUMN ops.work.attempts IS NULL;

COMMENT ON COLUMN ops.work.key IS NULL;

COMMENT ON COLUMN ops.work.kind IS NULL;

COMMENT ON COLUMN ops.work.last_error IS NULL;

COMMENT ON COLUMN ops.work.lease_epoch IS NULL;

COMMENT ON COLUMN ops.work.lease_expires_at IS NULL;

COMMENT ON COLUMN ops.work.lease_owner IS NULL;

COMMENT ON COLUMN ops.work.max_attempts IS NULL;

COMMENT ON COLUMN ops.work.priority IS NULL;

COMMENT ON COLUMN ops.work.repoke IS NULL;

COMMENT ON COLUMN ops.work.run_at IS NULL;

COMMENT ON COLUMN ops.work.state IS NULL;

COMMENT ON COLUMN ops.work.updated_at IS NULL;

COMMENT ON COLUMN ops.work.work_id IS NULL;

COMMENT ON COLUMN ops.work_dead.attempts IS NULL;

COMMENT ON COLUMN ops.work_dead.died_at IS NULL;

COMMENT ON COLUMN ops.work_dead.key IS NULL;

COMMENT ON COLUMN ops.work_dead.kind IS NULL;

COMMENT ON COLUMN ops.work_dead.last_error IS NULL;

COMMENT ON COLUMN ops.work_dead.work_id IS NULL;

-- By hand: the new view goes.
DROP VIEW ops.devices;

COMMIT;
