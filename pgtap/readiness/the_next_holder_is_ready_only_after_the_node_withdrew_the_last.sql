-- Released means withdrawn (issue 13.6): when one booking of a GPU ends and the next begins, the
-- next holder is ready only once the node acknowledged the generation that withdrew the previous
-- holder and reported nothing still using the GPU. A silent node keeps it waiting and says why
-- (P6); an operator who fenced the node out of band can say so (ops.node_fence, audited).
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node, name AS node_name FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT uuid AS gpu FROM compute.devices WHERE node_id = :'node' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 01:00+00')) #>> '{data,reservation_id}' AS first \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'start', '2030-01-01 01:00+00',
                       'end', '2030-01-01 02:00+00')) #>> '{data,reservation_id}' AS next \gset
SELECT booking_id AS first_booking FROM compute.bookings WHERE reservation_id = :'first' \gset
SELECT booking_id AS next_booking FROM compute.bookings WHERE reservation_id = :'next' \gset
UPDATE compute.node_specs SET signed_generation = generation, envelope = '{}' WHERE node_id = :'node';
SELECT generation AS g1 FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g1, 'conditions', '[]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', :first_booking, 'state', 'exposed')), 'withdrawal', '{"in_use": []}'::jsonb));
SELECT is(compute.reservation_document(:'first') #>> '{readiness,state}', 'ready', 'the first holder is ready');
SELECT is(compute.reservation_document(:'next') #>> '{readiness,state}', 'not_running', 'the next one has not started');
SELECT is((SELECT spec #>> '{withdrawal,grace_seconds}' FROM compute.node_specs WHERE node_id = :'node'),
          (SELECT value::text FROM compute.limits WHERE name = 'withdrawal_grace_seconds'), 'the spec carries the grace period');

-- The first booking ends and the next begins; the node was last heard when the session opened.
SELECT compute.clock_advance(interval '1 hour', true);
SELECT compute.node_specs_tick();
UPDATE compute.node_specs SET signed_generation = generation, envelope = '{}' WHERE node_id = :'node';
SELECT generation AS g2 FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT is(compute.reservation_document(:'next') #>> '{readiness,state}', 'waiting_for_node', 'the silent node keeps the next holder waiting');
SELECT matches(compute.reservation_document(:'next') #>> '{readiness,reason}',
               format('not connected.*withdraws reservation %s', :'first'), 'and it sees why: the node is silent and the previous holder not withdrawn');
SELECT is((SELECT count(*) FROM ops.withdrawals WHERE node_id = :'node' AND reservation_id = :'first'), 1::bigint,
          'operators see the withdrawal the node has not confirmed');

-- The node comes back: it exposes the device but something still uses the GPU.
SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g2, 'conditions', '[]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', :next_booking, 'state', 'exposed')),
    'withdrawal', jsonb_build_object('in_use', jsonb_build_array(jsonb_build_object('gpu_uuid', :'gpu', 'mig_uuid', NULL, 'pids', '[4242]'::jsonb)))));
SELECT is(compute.reservation_document(:'next') #>> '{readiness,state}', 'waiting_for_node', 'a process the node could not stop: still waiting');
SELECT matches(compute.reservation_document(:'next') #>> '{readiness,reason}', 'still in use', 'because the GPU is still in use');

SELECT compute.node_observed(:'node', jsonb_build_object('generation', :g2, 'conditions', '[]'::jsonb,
    'devices', jsonb_build_array(jsonb_build_object('booking_id', :next_booking, 'state', 'exposed')), 'withdrawal', '{"in_use": []}'::jsonb));
SELECT is(compute.reservation_document(:'next') #>> '{readiness,state}', 'ready', 'withdrawn and exposed: ready');

-- Fencing: an operator who stopped what the node could not may say so, once, audited.
UPDATE compute.node_grants SET withdrawal_acked_generation = NULL WHERE booking_id = :first_booking;
SELECT is(compute.reservation_document(:'next') #>> '{readiness,state}', 'waiting_for_node', '(the withdrawal unconfirmed again)');
SELECT is(ops.node_fence(:'node_name', 'powered off at the PDU, INC-7'), 1, 'ops.node_fence confirms the node''s withdrawals');
SELECT results_eq(format($$SELECT compute.reservation_document(%L) #>> '{readiness,state}',
                                  (SELECT count(*) FROM compute.audit_events WHERE action = 'compute:nodes:fence' AND resource_id = %L
                                      AND reason = 'powered off at the PDU, INC-7')$$, :'next', :'node'),
                  $$VALUES ('ready', 1::bigint)$$, 'the next holder is ready, and the decision is audited');

SELECT * FROM finish();
ROLLBACK;
