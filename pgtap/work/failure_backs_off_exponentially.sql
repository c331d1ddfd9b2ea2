-- After the n-th failed attempt an item waits base * 2^(n-1) seconds, less up to half of it (jitter).
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
UPDATE compute.limits SET value = 2 WHERE name = 'work_backoff_base_seconds';

SELECT compute.work_poke('test.backoff', 'k');
CREATE TEMP TABLE failures (attempt integer, failed_at timestamptz, retry_at timestamptz) ON COMMIT DROP;

-- Claim when due, fail, note when it comes back: four times.
CREATE FUNCTION pg_temp.claim_and_fail() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_claim compute.work_claim;
BEGIN
    PERFORM compute.clock_pin((SELECT run_at FROM compute.work WHERE kind = 'test.backoff'), true);
    SELECT * INTO STRICT v_claim FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.backoff']);
    INSERT INTO failures VALUES (v_claim.attempts, compute.compute_now(),
                                 compute.work_fail(v_claim.work_id, v_claim.lease_epoch, 'boom ' || v_claim.attempts));
END
$$;
SELECT pg_temp.claim_and_fail() FROM generate_series(1, 4);

SELECT results_eq($$SELECT attempt FROM failures ORDER BY attempt$$, $$VALUES (1), (2), (3), (4)$$, 'four attempts');
SELECT ok(retry_at >= failed_at + 0.5 * 2 * 2 ^ (attempt - 1) * interval '1 second'
          AND retry_at <= failed_at + 2 * 2 ^ (attempt - 1) * interval '1 second',
          format('attempt %s backs off within [%s s, %s s]', attempt, 2 ^ (attempt - 1), 2 * 2 ^ (attempt - 1)))
  FROM failures ORDER BY attempt;
SELECT is((SELECT run_at FROM compute.work WHERE kind = 'test.backoff'), (SELECT retry_at FROM failures WHERE attempt = 4),
          'the item is due when work_fail said');
SELECT is_empty($$SELECT * FROM compute.work_claim('w1', 1, '1 minute', ARRAY['test.backoff'])$$,
                'it is not claimable before then');
SELECT is((SELECT last_error FROM compute.work WHERE kind = 'test.backoff'), 'boom 4', 'the last error is kept');

SELECT * FROM finish();
ROLLBACK;
