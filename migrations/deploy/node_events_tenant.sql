-- Deploy better_compute:node_events_tenant to pg
-- Node and node-flag events belong to the tenant whose site holds the node (they had none).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.outbox_node_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- The event is the tenant's whose site the node is in (an operator's site: nobody's).
    PERFORM compute.outbox_emit((SELECT s.tenant_id FROM compute.sites AS s WHERE s.site_id = NEW.site_id), 'node', NEW.node_id::text,
        CASE WHEN TG_OP = 'INSERT' THEN 'node.registered' ELSE 'node.inventory_changed' END,
        pg_catalog.jsonb_build_object('node_id', NEW.node_id, 'name', NEW.name, 'pool_id', NEW.pool_id,
                                      'gpus', pg_catalog.jsonb_array_length(NEW.inventory -> 'devices')));
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION compute.outbox_node_flag_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_flag compute.node_flags := coalesce(NEW, OLD);
BEGIN
    PERFORM compute.outbox_emit((SELECT s.tenant_id FROM compute.nodes AS n JOIN compute.sites AS s ON s.site_id = n.site_id
                                  WHERE n.node_id = v_flag.node_id), 'node', v_flag.node_id::text,
        CASE TG_OP WHEN 'INSERT' THEN 'node.flag_set' WHEN 'DELETE' THEN 'node.flag_cleared' ELSE 'node.flag_changed' END,
        pg_catalog.jsonb_build_object('node_id', v_flag.node_id, 'flag', v_flag.flag, 'by', v_flag.set_by, 'reason', v_flag.reason,
                                      'completed_at', v_flag.completed_at));
    RETURN NULL;
END
$$;
COMMIT;
