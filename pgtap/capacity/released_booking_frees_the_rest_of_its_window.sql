-- Releasing a running reservation at T truncates its window to [start, T): the rows stay as
-- history and the atom is free from T. A reservation that had not started is cancelled (its
-- bookings void), a provisional one void.
BEGIN;
SELECT plan(15);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
CREATE TEMP TABLE r ON COMMIT DROP AS
    SELECT 'running' AS name, (pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 04:00+00')
                               ->> 'reservation_id')::uuid AS id FROM t
    UNION ALL
    SELECT 'upcoming', (pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 06:00+00', '2030-01-01 08:00+00')
                        ->> 'reservation_id')::uuid FROM t;

SELECT compute.clock_advance('1 hour', true);
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 01:00+00', '2030-01-01 04:00+00'))$$,
                 'BC409', NULL, 'before the release the rest of the window is held');

-- Release the running one at 01:00.
SELECT is(compute.reservation_release(id) - 'bookings' - 'reservation_id' - 'pool_id' - 'created_at',
          jsonb_build_object('tenant_id', '00000000-0000-0000-0000-000000000001', 'project_id', NULL, 'shape', 'gpu',
                             'count', 1, 'state', 'released', 'phase', 'ended', 'start', '2030-01-01T00:00:00+00:00',
                             'end', '2030-01-01T01:00:00+00:00', 'same_node', false, 'expires_at', NULL, 'hold_until', NULL,
                             'ended_at', '2030-01-01T01:00:00+00:00', 'end_reason', 'released',
                             'readiness', jsonb_build_object('state', 'not_running', 'reason', 'ended', 'devices', 1, 'devices_ready', 0)),
          'release at 01:00 answers the reservation released, ending at 01:00')
  FROM r WHERE name = 'running';
SELECT results_eq(
    $$SELECT b.state, b.during FROM compute.bookings AS b JOIN r ON r.id = b.reservation_id WHERE r.name = 'running'$$,
    $$VALUES ('released'::text, '[2030-01-01 00:00+00, 2030-01-01 01:00+00)'::tstzrange)$$,
    'its booking row stays, released, truncated to [00:00, 01:00)');
SELECT is((SELECT r2.during FROM compute.reservations AS r2 JOIN r ON r.id = r2.reservation_id WHERE r.name = 'running'),
          '[2030-01-01 00:00+00, 2030-01-01 01:00+00)'::tstzrange, 'and so does the reservation''s window');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 04:00+00')$$,
                'the atom is free from 01:00');

-- Release the upcoming one: cancelled, its booking void, its window as it was.
SELECT is(compute.reservation_release(id) ->> 'state', 'cancelled', 'a reservation that has not started is cancelled')
  FROM r WHERE name = 'upcoming';
SELECT results_eq(
    $$SELECT b.state, b.during FROM compute.bookings AS b JOIN r ON r.id = b.reservation_id WHERE r.name = 'upcoming'$$,
    $$VALUES ('void'::text, '[2030-01-01 06:00+00, 2030-01-01 08:00+00)'::tstzrange)$$,
    'its booking is void and keeps its window');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 06:00+00', '2030-01-01 08:00+00')$$,
                'its window is free again');

-- A provisional (never activated) reservation released is void.
INSERT INTO r SELECT 'provisional', (compute.reserve(pgtap_fixtures.request(t.pool, 'gpu', 1, '2030-01-01 09:00+00',
                                                                           '2030-01-01 10:00+00')) ->> 'reservation_id')::uuid FROM t;
SELECT is(compute.reservation_release(id) ->> 'state', 'void', 'a provisional reservation released is void')
  FROM r WHERE name = 'provisional';
SELECT is((SELECT b.state FROM compute.bookings AS b JOIN r ON r.id = b.reservation_id WHERE r.name = 'provisional'),
          'void', 'and its booking too');

-- Released history still counts for usage; a later running reservation released at 02:30.
SELECT compute.clock_advance('90 minutes', true);
SELECT is(compute.reservation_release(b.reservation_id) ->> 'end', '2030-01-01T02:30:00+00:00',
          'the booking made at 01:00 releases at 02:30')
  FROM compute.bookings AS b JOIN t ON b.pool_id = t.pool
 WHERE b.state = 'held' AND b.during @> '2030-01-01 02:30+00'::timestamptz;
SELECT results_eq(
    $$SELECT b.state, b.during FROM compute.bookings AS b JOIN t ON b.pool_id = t.pool
       WHERE b.state IN ('released', 'held') ORDER BY lower(b.during)$$,
    $$VALUES ('released'::text, '[2030-01-01 00:00+00, 2030-01-01 01:00+00)'::tstzrange),
             ('released', '[2030-01-01 01:00+00, 2030-01-01 02:30+00)'),
             ('held', '[2030-01-01 06:00+00, 2030-01-01 08:00+00)')$$,
    'the GPU''s history: two released stretches, one booking to come');
SELECT is(concat_ws(' ', d ->> 'state', d ->> 'end', d ->> 'ended_at', d #>> '{bookings,0,state}'),
          'released 2030-01-01T01:00:00+00:00 2030-01-01T01:00:00+00:00 released',
          'releasing the first again at 02:30 changes nothing: it still ended at 01:00')
  FROM r, LATERAL compute.reservation_release(r.id) AS d WHERE name = 'running';
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:30+00', '2030-01-01 06:00+00')$$,
                'the GPU is free from 02:30 up to the next booking');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 05:00+00', '2030-01-01 07:00+00'))$$,
                 'BC409', NULL, 'but still not beyond it');

SELECT * FROM finish();
ROLLBACK;
