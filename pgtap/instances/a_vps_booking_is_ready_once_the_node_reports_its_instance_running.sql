-- A VPS booking is no device of the spec, so its readiness is its instance's: waiting for the node
-- until the node reports the instance running at its newest generation, ready then, waiting again
-- after a stop (a new generation), and failed with the node's reason when the instance failed.
BEGIN;
SELECT plan(4);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 1)) #>> '{data,instance_id}' AS instance \gset
SELECT b.booking_id AS booking FROM compute.bookings AS b JOIN compute.instances AS i USING (reservation_id) WHERE i.instance_id = :'instance' \gset

SELECT is(compute.booking_readiness(:booking) ->> 'state', 'waiting_for_node', 'provisioning: waiting for the node');
SELECT pgtap_fixtures.node_observes(:'node', jsonb_build_array(jsonb_build_object('instance_id', :'instance', 'generation', 1, 'state', 'running')));
SELECT is(compute.booking_readiness(:booking) ->> 'state', 'ready', 'the node reports it running: ready');
SELECT pgtap_fixtures.api('instances.stop', pgtap_fixtures.tenant('A'), jsonb_build_object('instance_id', :'instance'));
SELECT is(compute.booking_readiness(:booking) ->> 'state', 'waiting_for_node', 'stopped: not ready');
SELECT pgtap_fixtures.node_observes(:'node', jsonb_build_array(jsonb_build_object('instance_id', :'instance', 'generation', 2, 'state', 'failed',
                                                                                  'reason', 'image gone')));
SELECT is(compute.booking_readiness(:booking), jsonb_build_object('state', 'failed', 'reason', 'image gone'), 'failed, with the node''s reason');

SELECT * FROM finish();
ROLLBACK;
