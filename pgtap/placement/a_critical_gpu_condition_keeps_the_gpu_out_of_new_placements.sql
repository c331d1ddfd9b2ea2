-- A node reports GPU 0 fallen off the bus (XID 79): no new placement on that GPU, every booking
-- stays as it was (P6), operators see who said what and since when in ops.nodes, and the tenant
-- holding the GPU sees the condition on their reservation's device. When the node stops reporting
-- it, the GPU takes placements again. compute.capacity_free lists what placement may give: not such a GPU.
BEGIN;
SELECT plan(11);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node, name FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00')) -> 'data' AS r \gset
SELECT :'r'::jsonb #>> '{bookings,0,device_uuid}' AS held \gset
SELECT uuid AS other FROM compute.devices WHERE node_id = :'node' AND uuid <> :'held' \gset
SELECT generation AS g FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT worker_api.node_spec_signed(:'node', :g, '{}');
SELECT (SELECT jsonb_agg(to_jsonb(b) - 'booking_id' ORDER BY b.booking_id) FROM compute.bookings AS b WHERE node_id = :'node') AS bookings_before \gset

-- What a verified node.observed report applies: both GPUs fallen off the bus.
SELECT compute.node_spec_observed(:'node', :g, jsonb_build_array(
    jsonb_build_object('gpu_uuid', :'held', 'type', 'FallenOffBus', 'status', true, 'reason', 'Xid79', 'message', 'GPU has fallen off the bus'),
    jsonb_build_object('gpu_uuid', :'other', 'type', 'FallenOffBus', 'status', true, 'reason', 'Xid79', 'message', 'GPU has fallen off the bus'),
    jsonb_build_object('gpu_uuid', :'other', 'type', 'ThermalSlowdown', 'status', false, 'reason', 'NoSlowdown')));

SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                                        '{"tenant_id": "%s"}'))$$, :'pool', pgtap_fixtures.tenant('A')),
                 'BC409', NULL, 'a GPU fallen off the bus gets no new placement');
SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'gpu', 1, '2030-01-02 00:00+00', '2030-01-02 01:00+00',
                                                                        '{"tenant_id": "%s"}'))$$, :'pool', pgtap_fixtures.tenant('A')),
                 'BC409', NULL, 'nor a later one');
SELECT is((SELECT count(*) FROM compute.capacity_free(:'pool', 'gpu', '2030-01-01 00:00+00', '2030-01-01 01:00+00')),
          0::bigint, 'capacity_free lists neither GPU');
SELECT is((SELECT jsonb_agg(to_jsonb(b) - 'booking_id' ORDER BY b.booking_id) FROM compute.bookings AS b WHERE node_id = :'node'),
          :'bookings_before'::jsonb, 'the bookings are unchanged');
SELECT is((SELECT gpus_unschedulable FROM ops.nodes WHERE node_id = :'node'), 2::bigint, 'ops.nodes counts the GPUs kept out');
SELECT is((SELECT jsonb_path_query_first(gpu_conditions, '$[*] ? (@.gpu_uuid == $u && @.type == "FallenOffBus")', jsonb_build_object('u', :'held'))
                  - 'since' - 'reported_at' - 'index' - 'generation'
             FROM ops.nodes WHERE node_id = :'node'),
          jsonb_build_object('gpu_uuid', :'held', 'type', 'FallenOffBus', 'status', true, 'critical', true, 'reason', 'Xid79',
                             'message', 'GPU has fallen off the bus', 'by', 'node ' || :'name'),
          'operators see who reported what');
SELECT is((pgtap_fixtures.api('reservations.get', pgtap_fixtures.tenant('A'), jsonb_build_object('reservation_id', :'r'::jsonb ->> 'reservation_id'))
              #> '{data,bookings,0,conditions,0}') - 'since'::text,
          '{"type": "FallenOffBus", "status": true, "critical": true, "reason": "Xid79", "message": "GPU has fallen off the bus"}'::jsonb,
          'the tenant sees the condition on its device');

-- A report that no longer says it (the GPU is back): the other GPU takes placements again.
SELECT compute.node_spec_observed(:'node', :g, jsonb_build_array(
    jsonb_build_object('gpu_uuid', :'held', 'type', 'FallenOffBus', 'status', true, 'reason', 'Xid79', 'message', 'GPU has fallen off the bus')));
SELECT is((SELECT count(*) FROM compute.device_conditions AS c JOIN compute.devices AS d USING (device_id) WHERE d.uuid = :'other'),
          0::bigint, 'a condition not reported any more is gone');
SELECT is((SELECT array_agg(f.free_atoms) FROM compute.capacity_free(:'pool', 'gpu', '2030-01-01 00:00+00', '2030-01-01 01:00+00') AS f),
          ARRAY[1], 'capacity_free lists the GPU back');
SELECT is(compute.reserve(pgtap_fixtures.request(:'pool', 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                 jsonb_build_object('tenant_id', pgtap_fixtures.tenant('A')))) IS NOT NULL, true,
          'the GPU back takes placements again');

SELECT throws_ok(format($$SELECT compute.node_spec_observed(%L, %s, '[{"gpu_uuid": "GPU-nope", "type": "FallenOffBus", "status": true, "reason": "Xid79"}]')$$,
                        :'node', :g),
                 'BC400', NULL, 'a condition of a GPU the node does not have is refused');

SELECT * FROM finish();
ROLLBACK;
