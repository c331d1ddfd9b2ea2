-- A state's deadline comes from compute.limits and fires from compute_now(): the machine fails into
-- its quarantined state with the reason. While its BMC does not answer, no deadline fires: an
-- unreachable BMC changes BmcReachable and nothing else, and that time is not held against it.
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT agent_id AS agent FROM compute.machines WHERE machine_id = :'machine' \gset

SELECT ops.machine_manage('bm-1');
SELECT is((SELECT deadline FROM compute.machines WHERE machine_id = :'machine'),
          '2030-01-01 00:00+00'::timestamptz + compute.limit('machine_verify_seconds') * interval '1 second',
          'verifying has the deadline of its limit');
SELECT compute.machine_reconcile(:'machine');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS op \gset
SELECT compute.bmc_op_result(:'agent', (:'op'::jsonb ->> 'op_id')::bigint, (:'op'::jsonb ->> 'epoch')::bigint, 'unreachable', '{}', 'connection refused');
SELECT is(compute.machine_reconcile(:'machine'), 'unreachable', 'an unreachable BMC is not tried again at once');
SELECT compute.clock_advance(interval '1 hour', true);
SELECT is(compute.machine_reconcile(:'machine'), 'issued verify', 'later it is tried again');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS op \gset
SELECT compute.bmc_op_result(:'agent', (:'op'::jsonb ->> 'op_id')::bigint, (:'op'::jsonb ->> 'epoch')::bigint, 'unreachable', '{}', 'connection refused');
SELECT is((SELECT state || ' ' || bmc_reachable FROM compute.machines WHERE machine_id = :'machine'), 'verifying false',
          'an hour past the deadline with the BMC unreachable: still verifying, BmcReachable false');
SELECT compute.clock_advance(interval '1 minute', true);
SELECT compute.machine_reconcile(:'machine');
SELECT pgtap_fixtures.machine_sign(:'machine');
SELECT site_api.ops_claim(:'agent') -> 0 AS op \gset
SELECT compute.bmc_op_result(:'agent', (:'op'::jsonb ->> 'op_id')::bigint, (:'op'::jsonb ->> 'epoch')::bigint, 'failed', '{}', 'HTTP 503');
SELECT is((SELECT bmc_reachable FROM compute.machines WHERE machine_id = :'machine'), true, 'an answer (even a 503) makes it reachable');
SELECT cmp_ok((SELECT deadline FROM compute.machines WHERE machine_id = :'machine'), '>', compute.compute_now(),
              'the time it did not answer moved the deadline');
SELECT compute.clock_advance(compute.limit('machine_verify_seconds') * interval '1 second', true);
SELECT is(compute.machine_reconcile(:'machine'), 'deadline', 'then the deadline fires from compute_now()');
SELECT alike((SELECT state || ': ' || last_error FROM compute.machines WHERE machine_id = :'machine'),
            'verify_failed: verifying did not finish by its deadline%', 'quarantined with the reason');

SELECT * FROM finish();
ROLLBACK;
