-- complete / fail / extend with a lease epoch that is not current are FENCED (BC410) and change nothing.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT compute.work_poke('test.fence', 'k');
CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.fence']);
CREATE TEMP TABLE item_before ON COMMIT DROP AS SELECT * FROM compute.work WHERE kind = 'test.fence';

SELECT throws_ok($$SELECT compute.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch - 1 FROM claimed))$$,
                 'BC410', NULL, 'complete with a stale epoch is FENCED');
SELECT throws_ok($$SELECT compute.work_fail((SELECT work_id FROM claimed), (SELECT lease_epoch - 1 FROM claimed), 'boom')$$,
                 'BC410', NULL, 'fail with a stale epoch is FENCED');
SELECT throws_ok($$SELECT compute.work_extend((SELECT work_id FROM claimed), (SELECT lease_epoch + 1 FROM claimed), '1 minute')$$,
                 'BC410', NULL, 'extend with an epoch that never was is FENCED');
SELECT results_eq($$SELECT to_jsonb(w) FROM compute.work AS w WHERE kind = 'test.fence'$$,
                  $$SELECT to_jsonb(b) FROM item_before AS b$$, 'the item is unchanged');
SELECT lives_ok($$SELECT compute.work_complete((SELECT work_id FROM claimed), (SELECT lease_epoch FROM claimed))$$,
                'the current epoch still completes it');

SELECT * FROM finish();
ROLLBACK;
