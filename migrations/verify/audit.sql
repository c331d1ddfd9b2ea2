-- Verify better_compute:audit on pg

BEGIN;

SELECT event_id, tenant_id, principal, action, decision FROM compute.audit_events WHERE false;
SELECT tenant_id, hour, root, signature FROM compute.audit_checkpoints WHERE false;
SELECT 'compute.audit_proof(bigint)'::regprocedure, 'compute.audit_merkle_root(uuid, timestamptz)'::regprocedure,
       'compute.audit_hour_lock(uuid, timestamptz, boolean)'::regprocedure,
       'worker_api.audit_checkpoint_store(uuid, timestamptz, integer, bytea, text, bytea)'::regprocedure;

ROLLBACK;
