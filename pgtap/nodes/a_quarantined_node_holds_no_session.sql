-- Quarantine closes a node's session at the gateway's next heartbeat statement (answered as
-- fenced, so the gateway closes the connection), and the node opens no new one and asks for no
-- certificate until the flag is cleared.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' LIMIT 1 \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT is(node_api.heartbeats('gw-1', ARRAY[:'node'::uuid], ARRAY[:'epoch'::bigint]), '{}'::uuid[], 'a node''s session is heard');

SELECT compute.node_flag_set(:'node', 'quarantined', 'test', 'remediation gave up');
SELECT is(node_api.heartbeats('gw-1', ARRAY[:'node'::uuid], ARRAY[:'epoch'::bigint]), ARRAY[:'node'::uuid],
          'once quarantined, the next heartbeat statement answers it as fenced');
SELECT isnt((SELECT closed_at FROM compute.node_sessions WHERE node_id = :'node'), NULL, 'and its session is closed');
SELECT throws_ok(format('SELECT pgtap_fixtures.session_open(%L, ''gw-1'')', :'node'), 'BC403', NULL, 'no new session opens');
SELECT compute.node_flag_clear(:'node', 'quarantined');
SELECT lives_ok(format('SELECT pgtap_fixtures.session_open(%L, ''gw-1'')', :'node'), 'until the flag is cleared');

SELECT * FROM finish();
ROLLBACK;
