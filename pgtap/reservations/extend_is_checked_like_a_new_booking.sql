-- reservation_extend moves a live reservation's end, checked like a new booking: CAPACITY_CONFLICT
-- when another booking (or a layout change) is in the way, QUOTA_EXCEEDED when the longer window
-- exceeds a quota; a refused extension leaves the reservation as it was. Shortening frees the rest.
BEGIN;
SELECT plan(14);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN first uuid, ADD COLUMN second uuid;
UPDATE t SET first = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00') ->> 'reservation_id')::uuid,
             second = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00') ->> 'reservation_id')::uuid;
SELECT compute.quota_set('00000000-0000-0000-0000-000000000001', NULL, pool, NULL, 4) IS NOT NULL FROM t;
CREATE FUNCTION pg_temp.extend(p_which text, p_end timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT pgtap_fixtures.refusal(format('SELECT compute.reservation_extend(%L, %L)',
                                  (SELECT CASE p_which WHEN 'first' THEN first ELSE second END FROM t), p_end))
$$;
CREATE FUNCTION pg_temp.windows() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(r.during::text || '/' || b.during::text, ' ' ORDER BY r.during)
      FROM compute.reservations AS r JOIN compute.bookings AS b USING (reservation_id), t WHERE r.pool_id = t.pool AND r.state = 'active'
$$;

SELECT is(pg_temp.extend('first', '2030-01-01 03:00+00'), 'no error', 'the first extended to 03:00, where the second begins');
SELECT is(pg_temp.extend('first', '2030-01-01 03:30+00'),
          'BC409: Another reservation holds some of its atoms within the longer window; compute.capacity_earliest finds free windows.',
          'extended into the second: CAPACITY_CONFLICT');
SELECT is(pg_temp.windows(),
          '["2030-01-01 01:00:00+00","2030-01-01 03:00:00+00")/["2030-01-01 01:00:00+00","2030-01-01 03:00:00+00") '
          '["2030-01-01 03:00:00+00","2030-01-01 04:00:00+00")/["2030-01-01 03:00:00+00","2030-01-01 04:00:00+00")',
          'the refused extension left both reservations and their bookings as they were');

-- GPU-hours: 2 h (first) + 1 h (second) booked of 4.
SELECT is(pg_temp.extend('second', '2030-01-01 05:00+00'), 'no error', 'the second extended to 05:00: 4 GPU-hours in all');
SELECT is(pg_temp.extend('second', '2030-01-01 05:30+00'),
          'BC429: 2.000 GPU-hours remain in 2030-01 (2.000 used or booked, 2.500 asked); shorten the window or ask for less.',
          'to 05:30: QUOTA_EXCEEDED, the reservation''s own hours not counted twice');
SELECT is(pg_temp.extend('first', '2030-01-01 02:00+00'), 'no error', 'the first shortened back to 02:00');
SELECT is(pg_temp.extend('second', '2030-01-01 05:30+00'), 'no error', 'which makes room in the quota for the second to 05:30');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00',
                                             '{"tenant_id": "00000000-0000-0000-0000-000000000002"}')$$,
                'and frees the GPU from 02:00');

-- A layout change at 06:00: the whole GPU cannot be extended past it.
SELECT compute.device_set_layout(d.device_id, 'timeslice:2', '2030-01-01 06:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1);
SELECT compute.quota_set('00000000-0000-0000-0000-000000000001', NULL, pool, NULL, NULL) IS NOT NULL FROM t;
SELECT is(pg_temp.extend('second', '2030-01-01 06:30+00'),
          'BC409: The GPU''s layout changes within this window: book a window inside the atom''s validity.',
          'extended past the GPU''s layout change: CAPACITY_CONFLICT');
SELECT is(pg_temp.extend('second', '2030-01-01 06:00+00'), 'no error', 'up to it: fine');

-- Limits and ended reservations.
SELECT is(pg_temp.extend('second', '2030-02-01 00:00+00'), 'BC400: Windows of this offering last at most 30 days.',
          'longer than the offering allows: INVALID_ARGUMENT');
SELECT compute.clock_advance('4 hours', true);
SELECT is(pg_temp.extend('second', '2030-01-01 03:59+00'), 'BC400: To end a reservation now, release it.',
          'an end before now: INVALID_ARGUMENT');
SELECT is(pg_temp.extend('first', '2030-01-01 05:00+00'), 'BC400: Reserve again for a new window.',
          'a reservation whose window is over cannot be extended');
SELECT is(compute.reservation_extend(second, '2030-01-01 04:30+00') ->> 'end', '2030-01-01T04:30:00+00:00',
          'a running reservation can be cut short to a time after now') FROM t;

SELECT * FROM finish();
ROLLBACK;
