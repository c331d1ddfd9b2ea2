-- Verify better_compute:outbox on pg (reworked after @v0.4.0: supersedes verify/outbox@v0.4.0.sql)

BEGIN;

SELECT event_id, xid, tenant_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload FROM compute.outbox WHERE false;
SELECT 1 / (count(*) = 3)::int FROM pg_catalog.pg_trigger
 WHERE tgname IN ('reservations_outbox', 'nodes_outbox', 'node_flags_outbox');
SELECT 1 / (count(*) = 0)::int FROM pg_catalog.pg_trigger WHERE tgname = 'bookings_outbox';
SELECT 'worker_api.outbox_read(xid8, bigint, uuid, integer)'::regprocedure;

ROLLBACK;
