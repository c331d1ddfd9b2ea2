-- complete with p_again_at puts the item back to pending at that time (before a periodic kind's own period);
-- without it a one-off item is done.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT compute.work_poke('test.again', 'k');
CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.again']);
SELECT compute.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch FROM claimed), '2030-01-01 02:00+00');
SELECT results_eq($$SELECT state, run_at FROM compute.work WHERE kind = 'test.again'$$,
                  $$VALUES ('pending', '2030-01-01 02:00+00'::timestamptz)$$, 'pending at p_again_at');

SELECT compute.clock_pin('2030-01-01 02:00+00', true);
DELETE FROM claimed;
INSERT INTO claimed SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.again']);
SELECT is((SELECT count(*)::integer FROM claimed), 1, 'claimable at that time');
SELECT lives_ok($$SELECT worker_api.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch FROM claimed), 30)$$,
                'worker_api takes it as seconds from now');
SELECT results_eq($$SELECT state, run_at FROM compute.work WHERE kind = 'test.again'$$,
                  $$VALUES ('pending', '2030-01-01 02:00:30+00'::timestamptz)$$, 'pending 30 seconds later');

SELECT * FROM finish();
ROLLBACK;
