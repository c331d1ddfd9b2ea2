-- A later inventory that lacks a GPU: the node shows a DeviceMissing condition, the GPU gets no
-- new placements, and the booking on it stays (nothing is released because of a report).
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node, name FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00')) #>> '{data,bookings,0,device_uuid}' AS held \gset

-- The node now reports only the GPU it holds: the other one is missing (what a verified
-- node.inventory report applies).
SELECT compute.node_inventory_reported(:'node',
    jsonb_set(pgtap_fixtures.inventory(:'name', 2), '{devices}',
              (SELECT jsonb_agg(d) FROM jsonb_array_elements(pgtap_fixtures.inventory(:'name', 2) -> 'devices') AS d WHERE d ->> 'uuid' = :'held')));

SELECT is(pgtap_fixtures.api('nodes.get', pgtap_fixtures.tenant('A'), jsonb_build_object('node_id', :'node')) #> '{data,conditions,0,type}',
          '"DeviceMissing"', 'the node shows the missing GPU as a condition');
SELECT is((SELECT count(*) FROM compute.bookings WHERE node_id = :'node' AND state = 'held'), 1::bigint, 'the booking stays');
SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                                        '{"tenant_id": "%s"}'))$$, :'pool', pgtap_fixtures.tenant('A')),
                 'BC409', NULL, 'the missing GPU gets no new placement (the other is held)');
SELECT is((SELECT count(*) FROM compute.devices WHERE node_id = :'node' AND NOT present), 1::bigint, 'it is marked absent, not deleted');

SELECT * FROM finish();
ROLLBACK;
