-- Past max_attempts an item is dead (ops.work_dead, no longer claimable) until ops.work_retry queues it again.
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
UPDATE compute.limits SET value = 2 WHERE name = 'work_attempts';

CREATE TEMP TABLE item ON COMMIT DROP AS SELECT compute.work_poke('test.dead', 'k') AS work_id;
CREATE FUNCTION pg_temp.claim_and_fail() RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    v_claim compute.work_claim;
BEGIN
    PERFORM compute.clock_advance('1 hour', true);
    SELECT * INTO STRICT v_claim FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.dead']);
    RETURN compute.work_fail(v_claim.work_id, v_claim.lease_epoch, 'boom ' || v_claim.attempts);
END
$$;

SELECT isnt(pg_temp.claim_and_fail(), NULL, 'the first failure is retried');
SELECT is(pg_temp.claim_and_fail(), NULL, 'the second (max_attempts = 2) is not: work_fail returns NULL');
SELECT results_eq($$SELECT work_id, kind, key, attempts, last_error FROM ops.work_dead$$,
                  $$SELECT work_id, 'test.dead', 'k', 2, 'boom 2' FROM item$$, 'the item is in ops.work_dead');
SELECT compute.clock_advance('1 day', true);
SELECT is_empty($$SELECT * FROM compute.work_claim('w1', 10, '1 minute', ARRAY['test.dead'])$$, 'a dead item is never claimed');

SELECT lives_ok($$SELECT ops.work_retry((SELECT work_id FROM item))$$, 'an operator retries it');
SELECT results_eq($$SELECT state, attempts, run_at FROM compute.work WHERE kind = 'test.dead'$$,
                  $$VALUES ('pending', 0, compute.compute_now())$$, 'pending now with fresh attempts');
SELECT is_empty($$SELECT * FROM ops.work_dead$$, 'no longer dead');
SELECT throws_ok($$SELECT ops.work_retry((SELECT work_id FROM item))$$, 'BC404', NULL, 'only a dead item can be retried');

SELECT * FROM finish();
ROLLBACK;
