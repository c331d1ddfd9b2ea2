-- Commands: one per idempotency key (another command under the key is IDEMPOTENCY_MISMATCH), at
-- most commands_pending_per_node pending, delivered only signed, again until a result comes; the
-- first result counts.
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT (compute.command_enqueue(:'node', 'reboot', '{}', 'k1')).command_id AS cmd \gset

SELECT is((compute.command_enqueue(:'node', 'reboot', '{}', 'k1')).command_id, :'cmd'::uuid, 'the same key answers the same command');
SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'collect_inventory', '{}', 'k1')$$, :'node'), 'BC422', NULL,
                 'another command under the key is IDEMPOTENCY_MISMATCH');
SELECT is(node_api.commands_due(:'node', :epoch), '[]'::jsonb, 'an unsigned command is not delivered');
SELECT worker_api.command_signed(:'cmd', '{"sig": "x", "body": {"kind": "reboot"}}');
SELECT is(jsonb_array_length(node_api.commands_due(:'node', :epoch)), 1, 'a signed command is delivered');
SELECT is(node_api.commands_due(:'node', :epoch), '[]'::jsonb, 'not again at once');
SELECT compute.clock_advance(compute.limit('node_command_redelivery_seconds') * interval '1 second' + interval '1 second', true);
SELECT is(jsonb_array_length(node_api.commands_due(:'node', :epoch)), 1, 'again when no result came in time');
SELECT ok(compute.node_command_result(:'node', :'cmd', 'succeeded', 'rebooted') AND NOT compute.node_command_result(:'node', :'cmd', 'failed', 'x'),
          'the first result counts, a repeated one changes nothing');

SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'reboot', '{"delay": {"seconds": 0.5}}', 'k9')$$, :'node'), 'BC400', NULL,
                 'args with a fraction (which could never be signed) are refused');

UPDATE compute.limits SET value = 1 WHERE name = 'commands_pending_per_node';
SELECT compute.command_enqueue(:'node', 'collect_inventory', '{}', 'k2');
SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'collect_inventory', '{}', 'k3')$$, :'node'), 'BC429', NULL,
                 'past commands_pending_per_node a command is QUOTA_EXCEEDED');

SELECT * FROM finish();
ROLLBACK;
