-- When the MIG layout valid now changes on a node whose daemon acknowledges specs, the GPU is not
-- converged (MigConverged false, by the control plane) until the node says so for that generation
-- or a later one: placement leaves its atoms out meanwhile; an older report cannot clear it; the
-- node's MigFailed keeps it out, with the driver's message.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT uuid AS gpu FROM compute.devices WHERE node_id = :'node' \gset
SELECT generation AS g0 FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT worker_api.node_spec_signed(:'node', :g0, '{}');
SELECT compute.node_spec_observed(:'node', :g0, '[]');

SELECT ops.device_set_layout(:'gpu', 'mig:3g.71gb@0,3g.71gb@4');
SELECT generation AS g1 FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT is((SELECT to_jsonb(c) - 'device_id' - 'since' - 'reported_at' - 'message' FROM compute.device_conditions AS c),
          jsonb_build_object('type', 'MigConverged', 'status', false, 'reason', 'LayoutChanged', 'critical', true,
                             'generation', :g1, 'set_by', 'control-plane'),
          'the layout change marks the GPU not converged, by the control plane, at the new generation');
SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'mig:3g.71gb', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                                        '{"tenant_id": "%s"}'))$$, :'pool', pgtap_fixtures.tenant('A')),
                 'BC409', NULL, 'its instances are not placed before the node converged');

SELECT worker_api.node_spec_signed(:'node', :g1, '{}');
SELECT compute.node_spec_observed(:'node', :g0, jsonb_build_array(
    jsonb_build_object('gpu_uuid', :'gpu', 'type', 'MigConverged', 'status', true, 'reason', 'Converged')));
SELECT is((SELECT reason FROM compute.device_conditions), 'LayoutChanged', 'a report of the older generation does not clear it');

SELECT compute.node_spec_observed(:'node', :g1, jsonb_build_array(
    jsonb_build_object('gpu_uuid', :'gpu', 'type', 'MigConverged', 'status', false, 'reason', 'InsufficientResources'),
    jsonb_build_object('gpu_uuid', :'gpu', 'type', 'MigFailed', 'status', true, 'reason', 'InsufficientResources',
                       'message', 'nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources')));
SELECT is((SELECT message FROM ops.nodes, jsonb_to_recordset(gpu_conditions) AS x(type text, message text)
            WHERE node_id = :'node' AND type = 'MigFailed'),
          'nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources', 'MigFailed shows in ops.nodes with the driver''s message');
SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'mig:3g.71gb', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                                        '{"tenant_id": "%s"}'))$$, :'pool', pgtap_fixtures.tenant('A')),
                 'BC409', NULL, 'a GPU whose MIG change failed gets no placement');

SELECT compute.node_spec_observed(:'node', :g1, jsonb_build_array(
    jsonb_build_object('gpu_uuid', :'gpu', 'type', 'MigConverged', 'status', true, 'reason', 'Converged')));
SELECT is((SELECT count(*) FROM compute.device_conditions WHERE critical), 0::bigint, 'converged at the new generation: nothing critical');
SELECT is(compute.reserve(pgtap_fixtures.request(:'pool', 'mig:3g.71gb', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00',
                                                 jsonb_build_object('tenant_id', pgtap_fixtures.tenant('A')))) IS NOT NULL, true,
          'its instances are placed');

SELECT * FROM finish();
ROLLBACK;
