-- Verify better_compute:outbox on pg

BEGIN;

SELECT event_id, xid, tenant_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload FROM compute.outbox WHERE false;
SELECT 1 / (count(*) = 4)::int FROM pg_catalog.pg_trigger
 WHERE tgname IN ('reservations_outbox', 'bookings_outbox', 'nodes_outbox', 'node_flags_outbox');
SELECT 'worker_api.outbox_read(xid8, bigint, uuid, integer)'::regprocedure;

ROLLBACK;
