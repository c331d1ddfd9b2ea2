-- Verify better_compute:node_events_tenant on pg

BEGIN;

SELECT 1 / (pg_catalog.pg_get_functiondef('compute.outbox_node_changed()'::regprocedure) LIKE '%s.tenant_id%')::integer;

ROLLBACK;
