-- A periodic kind goes back to pending `every` after it completes; work_ensure_periodic makes its item once.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
INSERT INTO compute.work_periodic (kind, every) VALUES ('test.periodic', '5 minutes');

SELECT cmp_ok(compute.work_ensure_periodic(), '>=', 1, 'the periodic item is made');
SELECT is(compute.work_ensure_periodic(), 0, 'and only once');
CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.periodic']);
SELECT is((SELECT key FROM claimed), 'periodic', 'its key is periodic');

SELECT compute.clock_advance('20 seconds', true);
SELECT compute.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch FROM claimed));
SELECT results_eq($$SELECT state, run_at, attempts FROM compute.work WHERE kind = 'test.periodic'$$,
                  $$VALUES ('pending', '2030-01-01 00:05:20+00'::timestamptz, 0)$$, 'pending again, due `every` after completing');
SELECT is_empty($$SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.periodic'])$$, 'not due before then');

SELECT * FROM finish();
ROLLBACK;
