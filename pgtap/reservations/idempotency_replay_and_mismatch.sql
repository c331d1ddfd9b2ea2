-- A request repeated with the same idempotency key gets the same reservation back (nothing new is
-- booked), whatever happened to it since; the same key with a different request is
-- IDEMPOTENCY_MISMATCH naming the reservation the key belongs to. Keys are per tenant.
BEGIN;
SELECT plan(10);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
ALTER TABLE t ADD COLUMN request jsonb, ADD COLUMN first jsonb;
UPDATE t SET request = pgtap_fixtures.request(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00', '{"idempotency_key": "job-42"}');
UPDATE t SET first = compute.reserve(request);
SELECT is(compute.reserve(request), first, 'the same request and key replay the same answer') FROM t;
SELECT is(compute.reserve(request || jsonb_build_object('start', '2030-01-01T01:00:00Z', 'end', '2030-01-01T03:00:00+01:00')) ->> 'reservation_id',
          first ->> 'reservation_id', 'the same instants written another way are the same request') FROM t;
SELECT is((SELECT count(*)::integer FROM compute.reservations AS r, t WHERE r.pool_id = t.pool), 1, 'one reservation');
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b, t WHERE b.pool_id = t.pool), 1, 'holding one booking');

SELECT is(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"count": 2}')),
          format('BC422: Use a new key for a new request; the key belongs to reservation %s.', first ->> 'reservation_id'),
          'the same key for two GPUs is IDEMPOTENCY_MISMATCH') FROM t;
SELECT is(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"end": "2030-01-01T02:00:01Z"}')),
          format('BC422: Use a new key for a new request; the key belongs to reservation %s.', first ->> 'reservation_id'),
          'so is the same key for a window one second longer') FROM t;

-- Replays answer the reservation as it is now.
SELECT compute.reservation_activate((first ->> 'reservation_id')::uuid) IS NOT NULL FROM t;
SELECT is(compute.reserve(request) ->> 'state', 'active', 'a replay after activation answers it active') FROM t;
SELECT compute.reservation_release((first ->> 'reservation_id')::uuid) IS NOT NULL FROM t;
SELECT is(compute.reserve(request) ->> 'state', 'cancelled', 'a replay after its release answers it cancelled, and books nothing') FROM t;

-- Keys belong to a tenant: another tenant's job-42 is its own reservation.
SELECT isnt(compute.reserve(request || '{"tenant_id": "00000000-0000-0000-0000-000000000002"}') ->> 'reservation_id',
            first ->> 'reservation_id', 'another tenant''s same key is a new reservation') FROM t;
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b, t WHERE b.pool_id = t.pool AND b.state = 'held'), 1,
          'the only live booking is the other tenant''s');

SELECT * FROM finish();
ROLLBACK;
