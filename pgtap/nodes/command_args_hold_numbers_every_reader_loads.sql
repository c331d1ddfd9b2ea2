-- Command args are signed, sent to the daemon and answered by nodes.commands: they hold only
-- integers every JSON reader loads exactly (I-JSON: within 2^53 - 1; Python refuses integers of
-- over 4,300 digits), written without a decimal point (1.0 would reach the signer as a float), and
-- nest at most 32 deep. A 5,000-digit integer stored through ops.call broke every answer that
-- listed the command.
BEGIN;
SELECT plan(8);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset

SELECT is((compute.command_enqueue(:'node', 'reboot', '{"n": 9007199254740991, "m": -9007199254740991}', 'k1')).args ->> 'n',
          '9007199254740991', '2^53 - 1 (and its negative) is taken');
SELECT is(pgtap_fixtures.refusal(format($$SELECT compute.command_enqueue(%L, 'reboot', '{"n": [9007199254740992]}', 'k2')$$, :'node')),
          'BC400: Send larger numbers as strings (e.g. "18446744073709551615").', '2^53, even inside a list, is refused');
SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'reboot', jsonb_build_object('n', ('1' || repeat('0', 5000))::numeric), 'k3')$$, :'node'),
                 'BC400', 'command args hold an integer beyond 2^53 - 1', 'so is a 5,001-digit integer');
SELECT lives_ok(format($$SELECT compute.command_enqueue(%L, 'reboot', %L, 'k4')$$, :'node', repeat('{"a":', 32) || '1' || repeat('}', 32)),
                'args nested 32 deep are taken');
SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'reboot', %L, 'k5')$$, :'node', '{"a": ' || repeat('[', 33) || repeat(']', 33) || '}'),
                 'BC400', 'command args nest deeper than 32 levels', '33 deep are refused');
SELECT throws_ok(format($$SELECT compute.command_enqueue(%L, 'reboot', '{"n": {"m": 1.0}}', 'k6')$$, :'node'),
                 'BC400', 'command args hold a number with a decimal point', '1.0 is refused: the signer reads it as a float, never to be signed');
SELECT is((compute.command_enqueue(:'node', 'reboot', '{"n": 1e3}', 'k7')).args, '{"n": 1000}'::jsonb, '1e3 is the integer 1000');
SELECT is((SELECT count(*) FROM compute.node_commands WHERE node_id = :'node'), 3::bigint, 'only the three that were taken are queued');

SELECT * FROM finish();
ROLLBACK;
