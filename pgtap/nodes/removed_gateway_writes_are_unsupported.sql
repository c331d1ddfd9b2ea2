-- The node_api functions through which a gateway once wrote a node's inventory, acknowledgement,
-- command result and key itself stay defined (released verify scripts name them; an older gateway
-- must be told what to do), but each only answers UNSUPPORTED and changes nothing (P14).
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' LIMIT 1 \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT md5(inventory::text) AS inventory_before FROM compute.nodes WHERE node_id = :'node' \gset

SELECT throws_ok(format($$SELECT node_api.inventory_report(%L, %s, '{"version": 1, "devices": []}')$$, :'node', :epoch),
                 'BC501', NULL, 'inventory_report answers UNSUPPORTED');
SELECT throws_ok(format($$SELECT node_api.spec_observed(%L, %s, 1, '[{"type": "Ready"}]')$$, :'node', :epoch),
                 'BC501', NULL, 'spec_observed answers UNSUPPORTED');
SELECT throws_ok(format($$SELECT node_api.command_result(%L, %s, gen_random_uuid(), 'succeeded', 'forged')$$, :'node', :epoch),
                 'BC501', NULL, 'command_result answers UNSUPPORTED');
SELECT throws_ok(format($$SELECT node_api.node_key_renewed(%L, %s, '\x00')$$, :'node', :epoch),
                 'BC501', NULL, 'node_key_renewed answers UNSUPPORTED');
SELECT throws_ok(format($$SELECT node_api.node_public_key(%L)$$, :'node'),
                 'BC501', NULL, 'node_public_key answers UNSUPPORTED');
SELECT throws_ok(format($$SELECT node_api.session_open(%L, 'gw-1')$$, :'node'),
                 'BC501', NULL, 'session_open without the certificate''s key answers UNSUPPORTED');
SELECT is((SELECT md5(inventory::text) FROM compute.nodes WHERE node_id = :'node'), :'inventory_before',
          'the inventory is unchanged');
SELECT is((SELECT observed_generation FROM compute.node_specs WHERE node_id = :'node'), NULL,
          'no acknowledgement was recorded');

SELECT * FROM finish();
ROLLBACK;
