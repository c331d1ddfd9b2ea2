-- Ready means usable (issue 13.5): a reservation's device is ready only when its node acknowledged
-- a spec generation that grants it and reported it exposed; a node that cannot expose it makes it
-- failed, with the node's reason; until the node answers it waits, and says for what.
BEGIN;
SELECT plan(10);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 02:00+00')) #>> '{data,reservation_id}' AS r \gset
SELECT booking_id AS booking FROM compute.bookings WHERE reservation_id = :'r' \gset
UPDATE compute.node_specs SET signed_generation = generation, envelope = '{}' WHERE node_id = :'node';
SELECT generation AS g FROM compute.node_specs WHERE node_id = :'node' \gset

SELECT is((SELECT spec -> 'devices' -> 0 ->> 'booking_id' FROM compute.node_specs WHERE node_id = :'node'), :'booking',
          'the spec names each booking it grants');
SELECT is(compute.reservation_document(:'r') #>> '{readiness,state}', 'waiting_for_node', 'active is not ready: the node has not answered');
SELECT matches(compute.reservation_document(:'r') #>> '{bookings,0,readiness,reason}',
               'has not acknowledged spec generation ' || :g, 'the device says what it waits for');

SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g, 'conditions', '[]'::jsonb));
SELECT is(compute.reservation_document(:'r') #>> '{readiness,state}', 'waiting_for_node',
          'an acknowledgement that does not say whether the device is exposed is not enough');

SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g, 'conditions', '[{"type": "DevicesUnresolved"}]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', :booking, 'state', 'failed',
        'reason', 'DevicesUnresolved: no MIG device 3g.71gb@0 on GPU-x')), 'withdrawal', '{"in_use": []}'::jsonb));
SELECT is(compute.reservation_document(:'r') #>> '{readiness,state}', 'failed', 'a node that cannot expose the device: failed');
SELECT is(compute.reservation_document(:'r') #>> '{readiness,reason}', 'DevicesUnresolved: no MIG device 3g.71gb@0 on GPU-x',
          'with the node''s condition');
SELECT is((SELECT state FROM ops.readiness WHERE booking_id = :booking), 'failed', 'operators see it in ops.readiness');

SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g, 'conditions', '[]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', :booking, 'state', 'exposed')), 'withdrawal', '{"in_use": []}'::jsonb));
SELECT is(compute.reservation_document(:'r') #>> '{readiness,state}', 'ready', 'exposed by the node: ready');
SELECT is(compute.reservation_document(:'r') #>> '{bookings,0,readiness,state}', 'ready', 'and so is its device');

SELECT throws_ok(format('SELECT compute.node_observed(%L, %L)', :'node', jsonb_build_object('generation', :g, 'conditions', '[]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', 'x', 'state', 'exposed')))), 'BC400', NULL,
    'a device report that is not {booking_id, state, reason} is a contract error (the report is rejected)');

SELECT * FROM finish();
ROLLBACK;
