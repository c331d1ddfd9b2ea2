-- A lease that expired is claimed by another owner with the next epoch; the old owner is then FENCED.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT compute.work_poke('test.reclaim', 'k');
CREATE TEMP TABLE old_lease ON COMMIT DROP AS SELECT * FROM compute.work_claim('w1', 1, '30 seconds', ARRAY['test.reclaim']);

SELECT is_empty($$SELECT * FROM compute.work_claim('w2', 10, '30 seconds', ARRAY['test.reclaim'])$$,
                'a live lease is not claimable');
SELECT compute.clock_advance('31 seconds', true);
CREATE TEMP TABLE new_lease ON COMMIT DROP AS SELECT * FROM compute.work_claim('w2', 10, '30 seconds', ARRAY['test.reclaim']);

SELECT results_eq($$SELECT work_id, lease_epoch, attempts FROM new_lease$$,
                  $$SELECT work_id, lease_epoch + 1, attempts + 1 FROM old_lease$$,
                  'the expired lease is reclaimed: same item, next epoch, one more attempt');
SELECT results_eq($$SELECT lease_owner, lease_expires_at FROM compute.work WHERE kind = 'test.reclaim'$$,
                  $$VALUES ('w2', '2030-01-01 00:01:01+00'::timestamptz)$$, 'w2 holds the lease now');
SELECT throws_ok($$SELECT compute.work_complete((SELECT work_id FROM old_lease), (SELECT lease_epoch FROM old_lease))$$,
                 'BC410', NULL, 'the old owner cannot complete it');
SELECT throws_ok($$SELECT compute.work_extend((SELECT work_id FROM old_lease), (SELECT lease_epoch FROM old_lease), '1 minute')$$,
                 'BC410', NULL, 'nor extend its lease');
SELECT is((SELECT lease_owner FROM compute.work WHERE kind = 'test.reclaim'), 'w2', 'the new owner keeps it');

SELECT * FROM finish();
ROLLBACK;
