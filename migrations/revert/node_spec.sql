-- Revert better_compute:node_spec from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP TRIGGER bookings_node_spec_insert ON compute.bookings;
DROP TRIGGER bookings_node_spec_update ON compute.bookings;
DROP TRIGGER devices_node_spec ON compute.devices;
DROP TRIGGER nodes_node_spec ON compute.nodes;
DROP FUNCTION node_api.spec_observed(uuid, bigint, bigint, jsonb);
DROP FUNCTION node_api.spec_get(uuid, bigint);
DROP FUNCTION worker_api.node_spec_signed(uuid, bigint, jsonb);
DROP FUNCTION worker_api.node_spec_to_sign(uuid);
DROP FUNCTION compute.node_specs_lagging();
DROP FUNCTION compute.node_specs_tick();
DROP FUNCTION compute.node_spec_node_changed();
DROP FUNCTION compute.node_spec_bookings_changed();
DROP FUNCTION compute.node_spec_refresh(uuid);
DROP FUNCTION compute.node_spec_document(uuid);
DROP TABLE compute.node_specs;

COMMIT;
