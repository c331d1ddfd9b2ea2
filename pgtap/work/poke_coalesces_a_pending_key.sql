-- A second poke for a pending (kind, key) adds no row: it runs once, as early and as urgently as asked.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE pokes ON COMMIT DROP AS
    SELECT compute.work_poke('test.coalesce', 'k', '{"n": 1}', '2030-01-01 00:10+00', 0) AS first,
           compute.work_poke('test.coalesce', 'k', '{"n": 2}', '2030-01-01 00:05+00', 5) AS second;

SELECT is((SELECT second FROM pokes), (SELECT first FROM pokes), 'the second poke returns the pending item');
SELECT is((SELECT count(*)::integer FROM compute.work WHERE kind = 'test.coalesce'), 1, 'one row for the key');
SELECT results_eq(
    $$SELECT state, run_at, priority, payload, repoke FROM compute.work WHERE kind = 'test.coalesce'$$,
    $$VALUES ('pending', '2030-01-01 00:05+00'::timestamptz, 5, '{"n": 2}'::jsonb, false)$$,
    'the earlier run_at, the higher priority and the latest payload win; not a repoke');
SELECT isnt(compute.work_poke('test.coalesce', 'other'), (SELECT first FROM pokes), 'another key is another item');

SELECT * FROM finish();
ROLLBACK;
