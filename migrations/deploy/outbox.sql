-- Deploy better_compute:outbox to pg
-- Snapshot of sql/410_outbox.sql when this change was planned.

BEGIN;

-- The transactional outbox (DESIGN §9, P1, P3): triggers write one event per change, in the same
-- transaction as the change, stamped with the transaction's id (pg_current_xact_id()).
--
-- Readers page by (xid, event_id) and only take events of transactions below the current
-- snapshot's xmin: every transaction below xmin has finished, so an event of a transaction that
-- started earlier but commits later than another is never skipped: the reader waits for it. (The
-- price: a transaction that stays open holds delivery back.) Each aggregate (a reservation, a
-- node) numbers its events 1, 2, 3, … without gaps: the counter row is updated in the writing
-- transaction and rolls back with it. Each transaction sends one content-free NOTIFY bc_outbox;
-- readers re-query, and poll as well, so a lost NOTIFY only delays.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.outbox (
    event_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid            xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    tenant_id      uuid,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    aggregate_seq  bigint NOT NULL CHECK (aggregate_seq > 0),
    event_type     text NOT NULL CHECK (event_type ~ '^[a-z_]+\.[a-z_]+$'),
    payload        jsonb NOT NULL,
    occurred_at    timestamptz NOT NULL,
    UNIQUE (aggregate_type, aggregate_id, aggregate_seq)
);
CREATE INDEX outbox_order ON compute.outbox (xid, event_id);
CREATE INDEX outbox_tenant_order ON compute.outbox (tenant_id, xid, event_id);
COMMENT ON TABLE compute.outbox IS 'One event per change, written in the changing transaction; read in (xid, event_id) order below xmin.';

CREATE TABLE compute.outbox_sequences (
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    last_seq       bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
COMMENT ON TABLE compute.outbox_sequences IS 'Per-aggregate event counters (gapless: they roll back with the transaction).';

CREATE TABLE compute.outbox_cursors (
    consumer   text PRIMARY KEY,
    xid        xid8 NOT NULL DEFAULT '0',
    event_id   bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.outbox_cursors IS 'Where each internal consumer of the outbox (e.g. webhook fan-out) has read to.';

CREATE FUNCTION compute.outbox_emit(p_tenant_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_seq     bigint;
    v_payload jsonb := p_payload;
BEGIN
    -- Bounded payload (P12): an oversized one is replaced by a marker that says where to look.
    IF pg_catalog.octet_length(v_payload::text) > compute.limit('outbox_payload_bytes') THEN
        v_payload := pg_catalog.jsonb_build_object('truncated', true, 'aggregate_type', p_aggregate_type, 'aggregate_id', p_aggregate_id);
    END IF;
    INSERT INTO compute.outbox_sequences AS s (aggregate_type, aggregate_id, last_seq)
    VALUES (p_aggregate_type, p_aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING s.last_seq INTO v_seq;
    INSERT INTO compute.outbox (tenant_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, occurred_at)
    VALUES (p_tenant_id, p_aggregate_type, p_aggregate_id, v_seq, p_event_type, v_payload, compute.compute_now());
    PERFORM pg_catalog.pg_notify('bc_outbox', '');  -- identical notifications of one transaction are sent once
END
$$;
COMMENT ON FUNCTION compute.outbox_emit(uuid, text, text, text, jsonb) IS 'Write one event of an aggregate, numbered in sequence, and poke readers.';

CREATE TYPE compute.outbox_event AS (event_id bigint, xid xid8, tenant_id uuid, aggregate_type text, aggregate_id text,
                                     aggregate_seq bigint, event_type text, payload jsonb, occurred_at timestamptz);

CREATE FUNCTION compute.outbox_read(p_after_xid xid8, p_after_event_id bigint, p_tenant_id uuid DEFAULT NULL,
                                    p_limit integer DEFAULT NULL)
RETURNS SETOF compute.outbox_event
LANGUAGE sql STABLE
AS $$
    SELECT o.event_id, o.xid, o.tenant_id, o.aggregate_type, o.aggregate_id, o.aggregate_seq, o.event_type, o.payload, o.occurred_at
      FROM compute.outbox AS o
     WHERE (o.xid, o.event_id) > (coalesce(p_after_xid, '0'::xid8), coalesce(p_after_event_id, 0))
       AND o.xid < pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())
       AND (p_tenant_id IS NULL OR o.tenant_id = p_tenant_id)
     ORDER BY o.xid, o.event_id
     LIMIT least(coalesce(p_limit, compute.limit('outbox_read_batch')), compute.limit('outbox_read_batch'))
$$;
COMMENT ON FUNCTION compute.outbox_read(xid8, bigint, uuid, integer) IS
    'Events after the cursor (xid, event_id) of transactions that have all finished, in order; a tenant''s only when given.';

-- Triggers: reservations and bookings (tenant events), nodes and node flags (operator events).
CREATE FUNCTION compute.outbox_reservation_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.outbox_emit(NEW.tenant_id, 'reservation', NEW.reservation_id::text,
        CASE WHEN TG_OP = 'INSERT' THEN 'reservation.created'
             WHEN NEW.state IS DISTINCT FROM OLD.state THEN 'reservation.' || CASE NEW.state WHEN 'active' THEN 'activated' ELSE NEW.state END
             WHEN NEW.during IS DISTINCT FROM OLD.during THEN 'reservation.extended'
             ELSE 'reservation.renewed' END,
        pg_catalog.jsonb_build_object('reservation_id', NEW.reservation_id, 'state', NEW.state, 'pool_id', NEW.pool_id,
                                      'shape', NEW.shape, 'count', NEW.count, 'start', lower(NEW.during), 'end', upper(NEW.during),
                                      'hold_until', NEW.hold_until, 'project_id', NEW.project_id));
    RETURN NULL;
END
$$;
CREATE TRIGGER reservations_outbox AFTER INSERT OR UPDATE OF state, during, hold_until ON compute.reservations
    FOR EACH ROW EXECUTE FUNCTION compute.outbox_reservation_changed();

CREATE FUNCTION compute.outbox_booking_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.outbox_emit(NEW.tenant_id, 'reservation', NEW.reservation_id::text,
        'booking.' || CASE WHEN TG_OP = 'INSERT' THEN 'created' WHEN NEW.state IS DISTINCT FROM OLD.state THEN NEW.state ELSE 'moved' END,
        pg_catalog.jsonb_build_object('reservation_id', NEW.reservation_id, 'atom_id', NEW.atom_id, 'node_id', NEW.node_id,
                                      'device_id', NEW.device_id, 'state', NEW.state, 'start', lower(NEW.during), 'end', upper(NEW.during)));
    RETURN NULL;
END
$$;
CREATE TRIGGER bookings_outbox AFTER INSERT OR UPDATE OF state, during ON compute.bookings
    FOR EACH ROW EXECUTE FUNCTION compute.outbox_booking_changed();

CREATE FUNCTION compute.outbox_node_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.outbox_emit(NULL, 'node', NEW.node_id::text,
        CASE WHEN TG_OP = 'INSERT' THEN 'node.registered' ELSE 'node.inventory_changed' END,
        pg_catalog.jsonb_build_object('node_id', NEW.node_id, 'name', NEW.name, 'pool_id', NEW.pool_id,
                                      'gpus', pg_catalog.jsonb_array_length(NEW.inventory -> 'devices')));
    RETURN NULL;
END
$$;
CREATE TRIGGER nodes_outbox AFTER INSERT OR UPDATE OF inventory ON compute.nodes
    FOR EACH ROW EXECUTE FUNCTION compute.outbox_node_changed();

CREATE FUNCTION compute.outbox_node_flag_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_flag compute.node_flags := coalesce(NEW, OLD);
BEGIN
    PERFORM compute.outbox_emit(NULL, 'node', v_flag.node_id::text,
        CASE TG_OP WHEN 'INSERT' THEN 'node.flag_set' WHEN 'DELETE' THEN 'node.flag_cleared' ELSE 'node.flag_changed' END,
        pg_catalog.jsonb_build_object('node_id', v_flag.node_id, 'flag', v_flag.flag, 'by', v_flag.set_by, 'reason', v_flag.reason,
                                      'completed_at', v_flag.completed_at));
    RETURN NULL;
END
$$;
CREATE TRIGGER node_flags_outbox AFTER INSERT OR UPDATE OR DELETE ON compute.node_flags
    FOR EACH ROW EXECUTE FUNCTION compute.outbox_node_flag_changed();

CREATE FUNCTION worker_api.outbox_read(p_after_xid xid8, p_after_event_id bigint, p_tenant_id uuid DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS SETOF compute.outbox_event
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.outbox_read(p_after_xid, p_after_event_id, p_tenant_id, p_limit) $$;
COMMENT ON FUNCTION worker_api.outbox_read(xid8, bigint, uuid, integer) IS 'Events after a cursor, below xmin, in order (see compute.outbox_read).';

COMMIT;
