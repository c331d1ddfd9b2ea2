-- A node that cannot run one instance (a bad image) reports it failed: that instance fails, leaves
-- the spec (its domain goes), keeps its booking until deleted; the other instance on the node runs on.
BEGIN;
SELECT plan(6);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 1)) #>> '{data,instance_id}' AS good \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'),
                          pgtap_fixtures.vps_input(:'pool', 1) || '{"image": "no-such-image.qcow2"}') #>> '{data,instance_id}' AS bad \gset
SELECT pgtap_fixtures.node_observes(:'node', jsonb_build_array(
    jsonb_build_object('instance_id', :'good', 'generation', 1, 'state', 'running'),
    jsonb_build_object('instance_id', :'bad', 'generation', 1, 'state', 'failed', 'reason', 'image no-such-image.qcow2 not found')));

SELECT is((SELECT state || ': ' || failure FROM compute.instances WHERE instance_id = :'bad'), 'failed: image no-such-image.qcow2 not found',
          'the bad image fails its instance, with the node''s reason');
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'good'), 'running', 'the other instance runs on');
SELECT is((SELECT jsonb_agg(i ->> 'instance_id') FROM compute.node_specs AS s, jsonb_array_elements(s.spec -> 'instances') AS i
            WHERE s.node_id = :'node'), jsonb_build_array(:'good'), 'the failed one left the spec (its domain goes)');
SELECT is((SELECT conditions FROM compute.node_specs WHERE node_id = :'node'), '[]'::jsonb, 'the node has no fault');
SELECT is(pgtap_fixtures.api('instances.delete', pgtap_fixtures.tenant('A'), jsonb_build_object('instance_id', :'bad')) #>> '{data,state}',
          'deleting', 'deleting a failed instance releases its booking');
SELECT pgtap_fixtures.node_observes(:'node');
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'bad'), 'deleted', 'deleted once the node applied the spec without it');

SELECT * FROM finish();
ROLLBACK;
