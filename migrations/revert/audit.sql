-- Revert better_compute:audit from pg

BEGIN;

DROP FUNCTION ops.audit_export(uuid, timestamptz, timestamptz);
DROP FUNCTION ops.audit_proof(bigint);
DROP FUNCTION worker_api.audit_checkpoint_store(uuid, timestamptz, integer, bytea, text, bytea);
DROP FUNCTION worker_api.audit_checkpoints_due(integer);
DROP FUNCTION worker_api.audit_key_register(text, bytea);
DROP FUNCTION compute.audit_export(uuid, timestamptz, timestamptz);
DROP FUNCTION compute.audit_checkpoint_store(uuid, timestamptz, integer, bytea, text, bytea);
DROP FUNCTION compute.audit_checkpoints_due(integer);
DROP FUNCTION compute.audit_proof(bigint);
DROP FUNCTION compute.audit_merkle_root(uuid, timestamptz);
DROP FUNCTION compute.audit_merkle_levels(bytea[]);
DROP FUNCTION compute.audit_hour_leaves(uuid, timestamptz);
DROP FUNCTION compute.audit_event_text(compute.audit_events);
DROP FUNCTION compute.audit_record(uuid, text, text, text, text, text, text, jsonb, text, jsonb);
DROP FUNCTION compute.audit_hour_lock(uuid, timestamptz, boolean);
DROP TABLE compute.audit_checkpoints;
DROP TABLE compute.audit_keys;
DROP TABLE compute.audit_events;

COMMIT;
