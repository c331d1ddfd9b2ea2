-- One live BMC operation per machine (a partial unique index), and a result is taken only from the
-- op's live epoch: an op taken back from a quiet agent, or cancelled by an operator, answers FENCED.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT agent_id AS agent FROM compute.machines WHERE machine_id = :'machine' \gset

SELECT ops.machine_manage('bm-1');
SELECT compute.machine_reconcile(:'machine');
SELECT throws_ok(format($$INSERT INTO compute.bmc_ops (machine_id, agent_id, epoch, state_name, generation, step, kind, state, created_at)
                          VALUES (%L, %L, 99, 'verifying', 1, 0, 'verify', 'unsigned', now())$$, :'machine', :'agent'),
                 '23505', NULL, 'a second live operation for the machine is refused by the index');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS first \gset
SELECT compute.clock_advance(compute.limit('bmc_op_seconds') * interval '1 second', true);
SELECT is(compute.machine_reconcile(:'machine'), 'issued verify', 'a running op past its deadline is taken back and issued again');
SELECT throws_ok(format('SELECT compute.bmc_op_result(%L, %s, %s, ''succeeded'', ''{}'', NULL)', :'agent',
                        :'first'::jsonb ->> 'op_id', :'first'::jsonb ->> 'epoch'),
                 'BC410', NULL, 'the late result of the old epoch is FENCED');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS second \gset
SELECT ops.machine_abort('bm-1', 'wrong rack');
SELECT throws_ok(format('SELECT compute.bmc_op_result(%L, %s, %s, ''succeeded'', ''{}'', NULL)', :'agent',
                        :'second'::jsonb ->> 'op_id', :'second'::jsonb ->> 'epoch'),
                 'BC410', NULL, 'the result of an op an operator aborted is FENCED');
SELECT is((SELECT state || ': ' || last_error FROM compute.machines WHERE machine_id = :'machine'), 'verify_failed: aborted: wrong rack',
          'abort in flight: the failed state, with the reason');
SELECT is((SELECT count(*) FROM compute.bmc_ops WHERE machine_id = :'machine' AND state IN ('queued', 'running')), 0::bigint,
          'nothing is live after the abort');

SELECT * FROM finish();
ROLLBACK;
