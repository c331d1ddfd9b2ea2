-- compute.capacity_earliest: the earliest [start, start + duration) with count atoms of a shape free
-- throughout, trying now (or not_before) and every time a booking ends or an atom becomes valid;
-- NULLs and a reason when the pool can never offer that many.
BEGIN;
SELECT plan(11);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- One node of two GPUs. One GPU booked 00:00-06:00; the other 00:00-02:00 and 03:00-05:00 (which
-- is which is placement's draw: the answers below are the same either way).
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
SELECT pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 00:00+00', '2030-01-01 02:00+00') IS NOT NULL FROM t;
SELECT compute.reservation_extend((b.doc ->> 'reservation_id')::uuid, '2030-01-01 06:00+00') IS NOT NULL
  FROM t, LATERAL (SELECT pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00') AS doc) AS b;
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 05:00+00') IS NOT NULL FROM t;
SELECT set_eq(
    $$SELECT array_agg(b.during ORDER BY b.during) FROM compute.bookings AS b, t WHERE b.pool_id = t.pool GROUP BY b.device_id$$,
    $$VALUES (ARRAY['[2030-01-01 00:00+00, 2030-01-01 02:00+00)'::tstzrange, '[2030-01-01 02:00+00, 2030-01-01 06:00+00)']),
             (ARRAY['[2030-01-01 00:00+00, 2030-01-01 02:00+00)'::tstzrange, '[2030-01-01 03:00+00, 2030-01-01 05:00+00)'])$$,
    'setup: one GPU free 02:00-03:00 and from 05:00, the other from 06:00');

SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '1 hour') AS e),
          '("2030-01-01 02:00:00+00","2030-01-01 03:00:00+00",)', 'one GPU for an hour: 02:00, in the gap');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '2 hours') AS e),
          '("2030-01-01 05:00:00+00","2030-01-01 07:00:00+00",)', 'for two hours the gap is too short: 05:00');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 2, '1 hour') AS e),
          '("2030-01-01 06:00:00+00","2030-01-01 07:00:00+00",)', 'two GPUs: 06:00');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '30 minutes', '2030-01-01 02:15+00') AS e),
          '("2030-01-01 02:15:00+00","2030-01-01 02:45:00+00",)', 'not before 02:15: 02:15 itself');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 3, '1 hour') AS e),
          '(,,"the pool has only 2 schedulable atoms of shape gpu, fewer than 3")', 'three GPUs: never, and why');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'mig:3g.71gb', 1, '1 hour') AS e),
          '(,,"the pool has only 0 schedulable atoms of shape mig:3g.71gb, fewer than 1")', 'a shape the pool is not laid out as: never');

-- GPU 1 split in two 3g.71gb from 10:00: its instances are found from then, and the whole GPU
-- still counts before then (one GPU is booked until 06:00).
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 10:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 1;
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'mig:3g.71gb', 2, '1 hour') AS e),
          '("2030-01-01 10:00:00+00","2030-01-01 11:00:00+00",)', 'two 3g.71gb: from 10:00, when they begin');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 2, '1 hour') AS e),
          '("2030-01-01 06:00:00+00","2030-01-01 07:00:00+00",)', 'two whole GPUs: still 06:00, before GPU 1 is split');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 2, '1 hour', '2030-01-01 09:30+00') AS e),
          '(,,"the pool has only 1 schedulable atoms of shape gpu, fewer than 2")', 'but not from 09:30 on');

SELECT throws_ok($$SELECT * FROM compute.capacity_earliest((SELECT pool FROM t), 'gpu', 0, '1 hour')$$, 'BC400', NULL,
                 'a count of 0 is INVALID_ARGUMENT');

SELECT * FROM finish();
ROLLBACK;
