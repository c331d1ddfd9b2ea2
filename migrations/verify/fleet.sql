-- Verify better_compute:fleet on pg

BEGIN;

SELECT site_id FROM compute.sites WHERE false;
SELECT pool_id, gpu_model, placement_policy FROM compute.pools WHERE false;
SELECT node_id, inventory, rank FROM compute.nodes WHERE false;
SELECT node_id, flag, set_by, reason FROM compute.node_flags WHERE false;
SELECT device_id, uuid, layout, mig_profiles, present FROM compute.devices WHERE false;
SELECT 'compute.site_create(text)'::regprocedure, 'compute.pool_create(uuid, text, text, text)'::regprocedure;

ROLLBACK;
