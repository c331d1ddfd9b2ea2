-- compute.reservations_expire: a provisional reservation past expires_at (provisional_seconds after
-- it was made) becomes void; a held one (hold_seconds) whose lease was not renewed by hold_until
-- ends there: expired, its window cut at hold_until, or cancelled if it had not started by then.
-- reservation_renew pushes hold_until to now + hold_seconds.
BEGIN;
SELECT plan(19);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
CREATE TEMP TABLE r ON COMMIT DROP AS
    SELECT 'provisional' AS name, compute.reserve(pgtap_fixtures.request(pool, 'gpu', 1, '2030-01-01 05:00+00', '2030-01-01 06:00+00')) AS doc FROM t
    UNION ALL
    SELECT 'late', compute.reserve(pgtap_fixtures.request(pool, 'gpu', 1, '2030-01-01 07:00+00', '2030-01-01 08:00+00')) FROM t
    UNION ALL
    SELECT 'held', pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 04:00+00', '{"hold_seconds": 600}') FROM t
    UNION ALL
    SELECT 'upcoming', pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00', '{"hold_seconds": 600}') FROM t
    UNION ALL
    SELECT 'short', pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 00:05+00', '{"hold_seconds": 600}') FROM t;
CREATE FUNCTION pg_temp.id(p_name text) RETURNS uuid LANGUAGE sql AS $$
    SELECT (doc ->> 'reservation_id')::uuid FROM r WHERE name = p_name
$$;
CREATE FUNCTION pg_temp.state(p_name text) RETURNS text LANGUAGE sql AS $$
    SELECT state || ' ' || during::text FROM compute.reservations WHERE reservation_id = pg_temp.id(p_name)
$$;

SELECT results_eq(
    $$SELECT name, doc ->> 'state', (doc ->> 'expires_at')::timestamptz, (doc ->> 'hold_until')::timestamptz FROM r ORDER BY name$$,
    $$VALUES ('held'::text, 'active'::text, NULL::timestamptz, '2030-01-01 00:10+00'::timestamptz),
             ('late', 'provisional', '2030-01-01 00:01+00', NULL), ('provisional', 'provisional', '2030-01-01 00:01+00', NULL),
             ('short', 'active', NULL, '2030-01-01 00:10+00'), ('upcoming', 'active', NULL, '2030-01-01 00:10+00')$$,
    'provisional ones expire 60 s after they were made; held ones hold until 10 minutes from now');
SELECT compute.clock_advance('59 seconds', true);
SELECT is(compute.reservations_expire(), 0, 'at 00:00:59 nothing expires');

SELECT compute.clock_advance('1 second', true);
SELECT throws_ok($$SELECT compute.reservation_activate(pg_temp.id('late'))$$, 'BC409', NULL,
                 'at 00:01 a provisional reservation can no longer be activated');
SELECT is(compute.reservations_expire(), 2, 'and the sweep voids both provisional reservations');
SELECT is(pg_temp.state('provisional'), 'void ["2030-01-01 05:00:00+00","2030-01-01 06:00:00+00")', 'void, window kept');
SELECT is((SELECT array_agg(DISTINCT b.state) FROM compute.bookings AS b WHERE b.reservation_id IN (pg_temp.id('provisional'), pg_temp.id('late'))),
          ARRAY['void'], 'their bookings are void');
SELECT throws_ok($$SELECT compute.reservation_activate(pg_temp.id('provisional'))$$, 'BC400',
                 format('reservation %s is void', pg_temp.id('provisional')), 'a void reservation cannot be activated');

-- 00:05: the held reservation renews its lease (to 00:15); 'short' has ended on its own.
SELECT compute.clock_advance('4 minutes', true);
SELECT is((compute.reservation_renew(pg_temp.id('held')) ->> 'hold_until')::timestamptz, '2030-01-01 00:15+00'::timestamptz,
          'renew at 00:05 pushes hold_until to 00:15');
SELECT throws_ok($$SELECT compute.reservation_renew(pg_temp.id('provisional'))$$, 'BC400', NULL,
                 'a reservation made without hold_seconds has no lease to renew');

-- 00:12: 'upcoming' (not renewed, not started) is cancelled; 'short' ended before its lease did.
SELECT compute.clock_advance('7 minutes', true);
SELECT is(compute.reservations_expire(), 1, 'at 00:12 the sweep ends one reservation');
SELECT is(pg_temp.state('upcoming'), 'cancelled ["2030-01-01 02:00:00+00","2030-01-01 03:00:00+00")',
          'the one that had not started is cancelled');
SELECT is(pg_temp.state('short'), 'active ["2030-01-01 00:00:00+00","2030-01-01 00:05:00+00")',
          'one whose window ended before its lease is left as it was');
SELECT is(pg_temp.state('held'), 'active ["2030-01-01 00:00:00+00","2030-01-01 04:00:00+00")', 'the renewed one holds on');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00')$$,
                'the cancelled window is free again');

-- 00:20: the held reservation, not renewed since, expired at 00:15: its window ends there.
SELECT compute.clock_advance('8 minutes', true);
SELECT is(compute.reservations_expire(), 1, 'at 00:20 the sweep ends the held reservation');
SELECT is(pg_temp.state('held'), 'expired ["2030-01-01 00:00:00+00","2030-01-01 00:15:00+00")',
          'expired, its window cut at hold_until (00:15), not at the sweep');
SELECT is((SELECT b.state || ' ' || b.during::text FROM compute.bookings AS b WHERE b.reservation_id = pg_temp.id('held')),
          'released ["2030-01-01 00:00:00+00","2030-01-01 00:15:00+00")', 'its booking is released history');
SELECT throws_ok($$SELECT compute.reservation_renew(pg_temp.id('held'))$$, 'BC400', NULL, 'an expired reservation cannot be renewed');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 00:20+00', '2030-01-01 04:00+00')$$,
                'the rest of its window is free (the other GPU holds 02:00-03:00)');

SELECT * FROM finish();
ROLLBACK;
