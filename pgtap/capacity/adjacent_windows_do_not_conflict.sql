-- Windows are [start, end): a booking ending at b and one starting at b never conflict; a minute
-- of overlap does.
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;

SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00')$$,
                'the only GPU booked [01:00, 02:00)');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00')$$,
                'and [02:00, 03:00) right after');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00')$$,
                'and [00:00, 01:00) right before');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 02:59+00', '2030-01-01 04:00+00'))$$,
                 'BC409', NULL, 'one minute of overlap is a conflict');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')$$,
                'the window starting where the last one ends is free');
SELECT results_eq(
    $$SELECT b.during FROM compute.bookings AS b JOIN t ON b.pool_id = t.pool WHERE b.state = 'held' ORDER BY b.during$$,
    $$VALUES ('[2030-01-01 00:00+00, 2030-01-01 01:00+00)'::tstzrange), ('[2030-01-01 01:00+00, 2030-01-01 02:00+00)'),
             ('[2030-01-01 02:00+00, 2030-01-01 03:00+00)'), ('[2030-01-01 03:00+00, 2030-01-01 04:00+00)')$$,
    'four back-to-back [) bookings of the one GPU');
SELECT is((SELECT coalesce(sum(f.free_atoms), 0)::integer
             FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 04:00+00', '2030-01-01 05:00+00') AS f),
          1, 'capacity_free: the GPU is free from 04:00, where the last booking ends');
SELECT is((SELECT coalesce(sum(f.free_atoms), 0)::integer
             FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 03:59+00', '2030-01-01 05:00+00') AS f),
          0, 'but not from 03:59');

SELECT * FROM finish();
ROLLBACK;
