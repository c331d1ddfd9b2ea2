-- A draining node is 'draining' in ops.nodes while a booking is live on it now, and 'drained' as
-- soon as none is, as the clock passes the end of its last current booking, or when that booking
-- is released; compute.node_drains_complete records when. Future bookings on it stay.
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 3, 1) AS pool;
ALTER TABLE t ADD COLUMN one text, ADD COLUMN two text, ADD COLUMN three text, ADD COLUMN early uuid, ADD COLUMN later uuid;
UPDATE t SET one = (SELECT name FROM compute.nodes WHERE node_id = pgtap_fixtures.node(pool, 1)),
             two = (SELECT name FROM compute.nodes WHERE node_id = pgtap_fixtures.node(pool, 2)),
             three = (SELECT name FROM compute.nodes WHERE node_id = pgtap_fixtures.node(pool, 3));
-- Node 1: booked now until 02:00 and again 05:00-06:00; node 2: booked now until 04:00; node 3: idle.
UPDATE t SET early = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 02:00+00') ->> 'reservation_id')::uuid;
UPDATE t SET later = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 04:00+00') ->> 'reservation_id')::uuid;
SELECT is((SELECT array_agg(DISTINCT n.name ORDER BY n.name) FROM compute.bookings AS b JOIN compute.nodes AS n USING (node_id), t
            WHERE b.reservation_id IN (t.early, t.later)), ARRAY[one, two], 'the two current bookings are on nodes 1 and 2') FROM t;
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 05:00+00', '2030-01-01 06:00+00') IS NOT NULL FROM t;

SELECT ops.node_drain(one, 'kernel update'), ops.node_drain(two, 'kernel update'), ops.node_drain(three, 'kernel update') FROM t;
SELECT results_eq(
    $$SELECT o.name, o.drain, (o.flag_details #>> '{draining,completed_at}')::timestamptz FROM ops.nodes AS o, t
       WHERE o.name IN (t.one, t.two, t.three) ORDER BY o.name$$,
    $$SELECT x.name, x.drain, x.completed_at FROM t, LATERAL (VALUES (t.one, 'draining', NULL::timestamptz), (t.two, 'draining', NULL),
                                                            (t.three, 'drained', '2030-01-01 00:00+00')) AS x(name, drain, completed_at)
       ORDER BY x.name$$,
    'at 00:00: nodes 1 and 2 draining, idle node 3 drained at once');

SELECT compute.clock_advance('1 hour', true);
SELECT is(o.drain, 'draining', 'at 01:00 node 1 is still draining') FROM ops.nodes AS o, t WHERE o.name = t.one;
SELECT is(compute.node_drains_complete(), 0, 'and no drain completes');

SELECT compute.clock_advance('1 hour', true);
SELECT is(o.drain, 'drained', 'at 02:00, its booking over, node 1 is drained') FROM ops.nodes AS o, t WHERE o.name = t.one;
SELECT is(o.drain, 'draining', 'node 2 is not') FROM ops.nodes AS o, t WHERE o.name = t.two;
SELECT is(compute.node_drains_complete(), 1, 'node_drains_complete records one completed drain');
SELECT is((o.flag_details #>> '{draining,completed_at}')::timestamptz, '2030-01-01 02:00+00', 'node 1''s drain completed at 02:00')
  FROM ops.nodes AS o, t WHERE o.name = t.one;
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b, t
            WHERE b.node_id = pgtap_fixtures.node(t.pool, 1) AND b.state = 'held' AND lower(b.during) = '2030-01-01 05:00+00'),
          1, 'its future booking stays');

-- Node 2's booking released at 02:30 completes its drain there and then.
SELECT compute.clock_advance('30 minutes', true);
SELECT is(compute.reservation_release(later) ->> 'state', 'released', 'node 2''s booking released at 02:30') FROM t;
SELECT is((o.flag_details #>> '{draining,completed_at}')::timestamptz, '2030-01-01 02:30+00', 'the release completed node 2''s drain')
  FROM ops.nodes AS o, t WHERE o.name = t.two;
SELECT is(o.drain, 'drained', 'node 2 is drained') FROM ops.nodes AS o, t WHERE o.name = t.two;

SELECT * FROM finish();
ROLLBACK;
