-- A booking that starts in three weeks holds its atom exactly like one running now: overlapping
-- requests are refused, capacity_free leaves it out, a layout change before it is refused; and a
-- provisional booking holds like an active one until it is voided.
BEGIN;
SELECT plan(10);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;

SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 02:00+00')$$,
                'the GPU is booked now');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-22 10:00+00', '2030-01-22 12:00+00')$$,
                'and in three weeks');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 01:00+00', '2030-01-01 03:00+00'))$$,
                 'BC409', NULL, 'a request overlapping the current booking is refused');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-22 11:00+00', '2030-01-22 13:00+00'))$$,
                 'BC409', NULL, 'a request overlapping the future booking is refused the same way');
SELECT is((SELECT coalesce(sum(f.free_atoms), 0)::integer
             FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-22 09:00+00', '2030-01-22 10:30+00') AS f),
          0, 'capacity_free: nothing free in a window overlapping the future booking');
SELECT is((SELECT coalesce(sum(f.free_atoms), 0)::integer
             FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-22 08:00+00', '2030-01-22 10:00+00') AS f),
          1, 'capacity_free: the GPU is free right before it');
SELECT throws_ok($$SELECT compute.device_set_layout(d.device_id, 'timeslice:2', '2030-01-10 00:00+00')
                     FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1)$$,
                 'BC409', NULL, 'a layout change scheduled before the future booking is refused');

-- A provisional booking (reserved, not yet activated) holds too.
CREATE TEMP TABLE provisional ON COMMIT DROP AS
    SELECT (compute.reserve(pgtap_fixtures.request(t.pool, 'gpu', 1, '2030-02-01 00:00+00', '2030-02-01 01:00+00'))
            ->> 'reservation_id')::uuid AS id FROM t;
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-02-01 00:30+00', '2030-02-01 01:30+00'))$$,
                 'BC409', NULL, 'a provisional future booking holds its atom');
SELECT is(compute.reservation_void(id) ->> 'state', 'void', 'voiding it') FROM provisional;
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-02-01 00:30+00', '2030-02-01 01:30+00')$$,
                'frees the window');

SELECT * FROM finish();
ROLLBACK;
