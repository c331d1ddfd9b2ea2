-- A layout change scheduled for T reaches the node's spec at T (the tick), not before: the spec
-- carries per GPU the layout valid now, since when, and for a MIG-capable GPU the MIG mode and the
-- instances to converge. The other GPU of the node keeps its booking and CDI device throughout.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00')) #>> '{data,bookings,0,device_uuid}' AS held \gset
SELECT uuid AS gpu, index AS gpu_index FROM compute.devices WHERE node_id = :'node' AND uuid <> :'held' \gset
SELECT spec -> 'devices' AS devices_held, generation AS g0 FROM compute.node_specs WHERE node_id = :'node' \gset

SELECT is((SELECT g -> 'mig' FROM compute.node_specs, jsonb_array_elements(spec -> 'gpus') AS g
            WHERE node_id = :'node' AND g ->> 'uuid' = :'gpu'),
          '{"mode": "disabled", "instances": []}'::jsonb, 'a whole GPU: MIG disabled, no instance');

SELECT ops.device_set_layout(:'gpu', 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 01:00+00');
SELECT is((SELECT g ->> 'layout' FROM compute.node_specs, jsonb_array_elements(spec -> 'gpus') AS g
            WHERE node_id = :'node' AND g ->> 'uuid' = :'gpu'), 'whole', 'before T the spec still says the layout valid now');
SELECT is((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), :g0::bigint, 'and its generation does not move');

SELECT compute.clock_advance(interval '1 hour', true);
SELECT cmp_ok(compute.node_specs_tick(), '>=', 1, 'at T the tick refreshes the node');
SELECT is((SELECT g FROM compute.node_specs, jsonb_array_elements(spec -> 'gpus') AS g
            WHERE node_id = :'node' AND g ->> 'uuid' = :'gpu'),
          jsonb_build_object('uuid', :'gpu', 'index', :gpu_index, 'layout', 'mig:3g.71gb@0,3g.71gb@4',
                             'since', to_jsonb('2030-01-01 01:00+00'::timestamptz),
                             'mig', '{"mode": "enabled", "instances": [{"profile": "3g.71gb", "placement": 0}, {"profile": "3g.71gb", "placement": 4}]}'::jsonb),
          'the spec carries the new layout, since T, with MIG mode and instances');
SELECT cmp_ok((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), '>', :g0::bigint, 'in a new generation');
SELECT is((SELECT spec -> 'devices' FROM compute.node_specs WHERE node_id = :'node'), :'devices_held'::jsonb,
          'the other GPU keeps its booking and CDI device throughout');

SELECT * FROM finish();
ROLLBACK;
