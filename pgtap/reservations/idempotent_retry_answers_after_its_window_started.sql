-- A retry with the same idempotency key gets the stored answer even when the window it asked for
-- has started (or ended) since: the key is looked up before the window is checked against now.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.request(pgtap_fixtures.fleet('pack', 1, 2), 'gpu', 1, '2030-01-01 00:00:30+00', '2030-01-01 00:10+00',
                                  '{"idempotency_key": "retry-me"}') AS request;
ALTER TABLE t ADD COLUMN first jsonb;
UPDATE t SET first = compute.reserve(request);

SELECT compute.clock_pin('2030-01-01 00:05+00', true);
SELECT is(compute.reserve(request) ->> 'reservation_id', first ->> 'reservation_id',
          'a retry after its start passed answers the stored reservation') FROM t;
SELECT compute.clock_pin('2030-01-01 00:20+00', true);
SELECT is(compute.reserve(request) ->> 'reservation_id', first ->> 'reservation_id',
          'so does a retry after its end passed') FROM t;
SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"count": 2}')), 5), 'BC422',
          'another request under the key is still IDEMPOTENCY_MISMATCH') FROM t;
SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"idempotency_key": "new"}')), 5), 'BC400',
          'a new key for a window that has started is INVALID_ARGUMENT') FROM t;

SELECT * FROM finish();
ROLLBACK;
