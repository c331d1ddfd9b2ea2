-- gpu_hours_per_month caps the tenant's GPU-hours per UTC calendar month: bookings count when they
-- are made, future ones included, released ones for the time they ran, voided or cancelled ones not;
-- a MIG instance counts its share of the GPU. QUOTA_EXCEEDED says in its HINT how much remains.
BEGIN;
SELECT plan(11);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 2, 2) AS pool;
SELECT compute.quota_set('00000000-0000-0000-0000-000000000001', NULL, pool, NULL, 10) IS NOT NULL FROM t;
CREATE FUNCTION pg_temp.book(p_shape text, p_count integer, p_start timestamptz, p_end timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT pgtap_fixtures.refusal(format('SELECT pgtap_fixtures.book(%L, %L, %s, %L, %L)', (SELECT pool FROM t), p_shape, p_count, p_start, p_end))
$$;

-- 4 GPU-hours on the 20th and 6 on the 25th: all ten of January's, booked in advance.
SELECT is(pg_temp.book('gpu', 1, '2030-01-20 00:00+00', '2030-01-20 04:00+00'), 'no error', '1 GPU x 4 h on the 20th');
SELECT is(pg_temp.book('gpu', 2, '2030-01-25 00:00+00', '2030-01-25 03:00+00'), 'no error', '2 GPUs x 3 h on the 25th');
SELECT is(pg_temp.book('gpu', 1, '2030-01-02 00:00+00', '2030-01-02 00:06+00'),
          'BC429: 0.000 GPU-hours remain in 2030-01 (10.000 used or booked, 0.100 asked); shorten the window or ask for less.',
          'six minutes more in January, before the future bookings start, are QUOTA_EXCEEDED');
SELECT is(pg_temp.book('gpu', 1, '2030-01-31 22:00+00', '2030-02-01 04:00+00'),
          'BC429: 0.000 GPU-hours remain in 2030-01 (10.000 used or booked, 2.000 asked); shorten the window or ask for less.',
          'a window reaching back into January from February is refused for its January hours');
SELECT is(pg_temp.book('gpu', 2, '2030-02-01 00:00+00', '2030-02-01 05:00+00'), 'no error', 'February is a new month: 10 GPU-hours');
SELECT is(pg_temp.book('gpu', 1, '2030-02-03 00:00+00', '2030-02-03 00:01+00'),
          'BC429: 0.000 GPU-hours remain in 2030-02 (10.000 used or booked, 0.017 asked); shorten the window or ask for less.',
          'and they are booked too');

-- Cancelling the 25th gives its 6 hours back; a MIG instance counts half a GPU.
SELECT compute.reservation_release(b.reservation_id) ->> 'state' FROM compute.bookings AS b, t
 WHERE b.pool_id = t.pool AND lower(b.during) = '2030-01-25 00:00+00' LIMIT 1;
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 2) AND d.index = 0;
SELECT is(pg_temp.book('mig:3g.71gb', 1, '2030-01-03 00:00+00', '2030-01-03 13:00+00'),
          'BC429: 6.000 GPU-hours remain in 2030-01 (4.000 used or booked, 6.500 asked); shorten the window or ask for less.',
          'cancelled, the 25th counts no more; 13 h of a 3g.71gb would be 6.5 GPU-hours');
SELECT is(pg_temp.book('mig:3g.71gb', 1, '2030-01-03 00:00+00', '2030-01-03 12:00+00'), 'no error', '12 h of it are 6 GPU-hours: fits');

-- Released early, a running booking counts the hours it ran: 1 GPU booked 00:00-04:00 on the
-- 20th, released at 01:00, uses one hour of its four.
SELECT compute.clock_pin('2030-01-20 01:00+00', true);
SELECT is(pg_temp.book('gpu', 1, '2030-01-20 01:00+00', '2030-01-20 01:01+00'),
          'BC429: 0.000 GPU-hours remain in 2030-01 (10.000 used or booked, 0.017 asked); shorten the window or ask for less.',
          'at 01:00 on the 20th January is full');
SELECT is(compute.reservation_release(b.reservation_id) ->> 'end', '2030-01-20T01:00:00+00:00', 'the running booking released at 01:00')
  FROM compute.bookings AS b, t WHERE b.pool_id = t.pool AND lower(b.during) = '2030-01-20 00:00+00';
SELECT is(pg_temp.book('gpu', 1, '2030-01-20 01:00+00', '2030-01-20 05:00+00'),
          'BC429: 3.000 GPU-hours remain in 2030-01 (7.000 used or booked, 4.000 asked); shorten the window or ask for less.',
          'it counts one hour: 3 remain');

SELECT * FROM finish();
ROLLBACK;
