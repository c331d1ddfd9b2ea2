-- Revert better_compute:outbox from pg

BEGIN;

DROP FUNCTION worker_api.outbox_read(xid8, bigint, uuid, integer);
DROP TRIGGER node_flags_outbox ON compute.node_flags;
DROP FUNCTION compute.outbox_node_flag_changed();
DROP TRIGGER nodes_outbox ON compute.nodes;
DROP FUNCTION compute.outbox_node_changed();
DROP TRIGGER bookings_outbox ON compute.bookings;
DROP FUNCTION compute.outbox_booking_changed();
DROP TRIGGER reservations_outbox ON compute.reservations;
DROP FUNCTION compute.outbox_reservation_changed();
DROP FUNCTION compute.outbox_read(xid8, bigint, uuid, integer);
DROP TYPE compute.outbox_event;
DROP FUNCTION compute.outbox_emit(uuid, text, text, text, jsonb);
DROP TABLE compute.outbox_cursors;
DROP TABLE compute.outbox_sequences;
DROP TABLE compute.outbox;

COMMIT;
