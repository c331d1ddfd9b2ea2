-- A poke while the item runs adds no row but flags it; completing puts it back to pending now.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT compute.work_poke('test.repoke', 'k');
CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.repoke']);

SELECT is(compute.work_poke('test.repoke', 'k'), (SELECT work_id FROM claimed), 'the poke lands on the running item');
SELECT results_eq($$SELECT state, repoke FROM compute.work WHERE kind = 'test.repoke'$$,
                  $$VALUES ('running', true)$$, 'still one row, running, flagged to run again');

SELECT compute.clock_advance('10 seconds', true);
SELECT lives_ok($$SELECT compute.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch FROM claimed))$$,
                'the run completes');
SELECT results_eq(
    $$SELECT state, repoke, run_at, attempts, lease_owner FROM compute.work WHERE kind = 'test.repoke'$$,
    $$VALUES ('pending', false, '2030-01-01 00:00:10+00'::timestamptz, 0, NULL::text)$$,
    'pending again, due now, flag cleared');
SELECT is((SELECT count(*)::integer FROM compute.work_claim('w2', 10, '1 minute', ARRAY['test.repoke'])), 1,
          'and claimable again');

SELECT * FROM finish();
ROLLBACK;
