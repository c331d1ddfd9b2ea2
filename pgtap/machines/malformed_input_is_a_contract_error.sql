-- What an agent or an operator sends that is malformed is INVALID_ARGUMENT, never another SQLSTATE:
-- a result that is no object, a credentials version that is no number, a join token hash that is
-- no hex, a credentials box of the wrong size.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT agent_id AS agent FROM compute.machines WHERE machine_id = :'machine' \gset
SELECT ops.machine_manage('bm-1');
SELECT compute.machine_reconcile(:'machine');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS op \gset

SELECT throws_ok(format('SELECT compute.bmc_op_result(%L, %s, %s, ''succeeded'', ''[1]'', NULL)', :'agent',
                        :'op'::jsonb ->> 'op_id', :'op'::jsonb ->> 'epoch'), 'BC400', NULL, 'a result that is no object');
SELECT throws_ok(format('SELECT compute.bmc_op_result(%L, %s, %s, ''succeeded'', ''{"credentials_version": "two"}'', NULL)', :'agent',
                        :'op'::jsonb ->> 'op_id', :'op'::jsonb ->> 'epoch'), 'BC400', NULL, 'a credentials version that is no number');
UPDATE compute.bmc_ops SET kind = 'vmedia_insert', args = '{"join_token": true}' WHERE op_id = (:'op'::jsonb ->> 'op_id')::bigint;
SELECT throws_ok(format('SELECT compute.bmc_op_result(%L, %s, %s, ''succeeded'', ''{"join_token_sha256": "zz"}'', NULL)', :'agent',
                        :'op'::jsonb ->> 'op_id', :'op'::jsonb ->> 'epoch'), 'BC400', NULL, 'a token hash that is no hex');
SELECT throws_ok($$SELECT ops.machine_credentials_set('bm-1', (SELECT key_id FROM compute.site_agents LIMIT 1), '\x00')$$,
                 'BC400', NULL, 'a credentials box of the wrong size');

SELECT * FROM finish();
ROLLBACK;
