-- Every node write carries its session epoch: a second session of the node fences the first,
-- whose writes (heartbeats, spec reports, command results, inventory) are FENCED.
BEGIN;
SELECT plan(6);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS first \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-2') AS second \gset

SELECT is(:second::bigint, :first::bigint + 1, 'a new session has a newer epoch');
SELECT is(node_api.heartbeats('gw-1', ARRAY[:'node'::uuid], ARRAY[:first::bigint]), ARRAY[:'node'::uuid],
          'the first session''s heartbeat answers it fenced');
SELECT is(node_api.heartbeats('gw-2', ARRAY[:'node'::uuid], ARRAY[:second::bigint]), '{}'::uuid[], 'the second one is current');
SELECT throws_ok(format('SELECT node_api.spec_get(%L, %s)', :'node', :first), 'BC410', NULL, 'the first cannot read its spec');
SELECT throws_ok(format('SELECT node_api.report(%L, %s, %L)', :'node', :first, '{"purpose": "node.inventory"}'), 'BC410', NULL,
                 'nor relay a report');
SELECT ok(NOT node_api.session_close(:'node', :first), 'closing the fenced session does not close the current one');

SELECT * FROM finish();
ROLLBACK;
