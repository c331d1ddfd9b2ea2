-- Revert better_compute:node_worker from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM compute.work WHERE kind IN ('node_specs.tick', 'node_specs.resend');
DELETE FROM compute.work_periodic WHERE kind IN ('node_specs.tick', 'node_specs.resend');
DROP FUNCTION worker_api.node_specs_resend();
DROP FUNCTION worker_api.node_specs_tick();

COMMIT;
