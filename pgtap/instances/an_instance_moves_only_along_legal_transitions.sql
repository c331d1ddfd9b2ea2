-- An instance's state moves only along the rows of compute.instance_transitions: pending ->
-- provisioning (admitted) -> running (the node says so) <-> stopped; a move outside them is refused
-- by the database whatever the caller (a direct UPDATE included), and so is stopping what is not running.
BEGIN;
SELECT plan(8);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A')) AS pool \gset
SELECT api.prepare('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool')) AS prepared \gset
SELECT (:'prepared'::jsonb #>> '{iam,resource,id}') AS instance \gset

SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'instance'), 'pending', 'before the decision it is pending');
SELECT is(api.admit((:'prepared'::jsonb ->> 'admission_id')::uuid,
                    '{"allowed": true, "reason": "t", "matched": [], "principal": "user:alice"}') #>> '{data,state}',
          'provisioning', 'admitted, it is provisioning');
SELECT is(pgtap_fixtures.refusal(format($$SELECT pgtap_fixtures.api('instances.stop', %L, '{"instance_id": "%s"}')$$,
                                        pgtap_fixtures.tenant('A'), :'instance')),
          'BC400: stop needs a running instance; instances.show says its state.', 'a provisioning instance cannot be stopped');
SELECT pgtap_fixtures.node_observes(node_id, jsonb_build_array(jsonb_build_object('instance_id', instance_id, 'generation', 1, 'state', 'running')))
  FROM compute.instances WHERE instance_id = :'instance';
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'instance'), 'running', 'the node ran it: running');
SELECT is(pgtap_fixtures.api('instances.stop', pgtap_fixtures.tenant('A'), jsonb_build_object('instance_id', :'instance')) #>> '{data,state}',
          'stopped', 'running -> stopped');
SELECT is(pgtap_fixtures.api('instances.start', pgtap_fixtures.tenant('A'), jsonb_build_object('instance_id', :'instance')) #>> '{data,state}',
          'running', 'stopped -> running');
SELECT throws_ok(format($$UPDATE compute.instances SET state = 'pending' WHERE instance_id = %L$$, :'instance'), 'BC400',
                 format('instance %s is running and cannot become pending', :'instance'), 'running -> pending is refused, even by a direct UPDATE');
SELECT throws_ok(format($$UPDATE compute.instances SET state = 'deleted', removed_generation = 1 WHERE instance_id = %L$$, :'instance'), 'BC400',
                 format('instance %s is running and cannot become deleted', :'instance'), 'running -> deleted skips deleting: refused');

SELECT * FROM finish();
ROLLBACK;
