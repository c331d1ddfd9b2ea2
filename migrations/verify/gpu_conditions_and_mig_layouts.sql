-- Verify better_compute:gpu_conditions_and_mig_layouts on pg

BEGIN;

SELECT 1 / (compute.device_condition_critical('FallenOffBus', true) AND compute.device_condition_critical('MigConverged', false)
            AND NOT compute.device_condition_critical('ThermalSlowdown', true))::integer;
SELECT device_id, type, status, reason, message, critical, generation, set_by, since, reported_at
  FROM compute.device_conditions WHERE false;
SELECT gpu_conditions, gpus_unschedulable FROM ops.nodes WHERE false;
SELECT 1 / (compute.node_spec_document(pg_catalog.gen_random_uuid()) ? 'gpus')::integer;

ROLLBACK;
