-- A cordoned, draining or quarantined node gets no new placements (bookings it holds stay); each
-- flag alone is enough. Flags record who set them and why; ops.node_cordon records the operator's
-- login (session_user).
BEGIN;
SELECT plan(17);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- Three nodes of one GPU; node 1 already holds a booking.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 3, 1) AS pool;
ALTER TABLE t ADD COLUMN held uuid;
UPDATE t SET held = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 02:00+00') ->> 'reservation_id')::uuid;
CREATE FUNCTION pg_temp.node_of(p_doc jsonb) RETURNS uuid LANGUAGE sql AS $$
    SELECT d.node_id FROM compute.devices AS d WHERE d.uuid = p_doc #>> '{bookings,0,device_uuid}'
$$;
CREATE FUNCTION pg_temp.request() RETURNS jsonb LANGUAGE sql AS $$
    SELECT pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')
$$;

SELECT is((SELECT count(*)::integer FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 03:00+00', '2030-01-01 04:00+00')),
          3, 'before the flags: capacity_free lists all three nodes');
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 1), 'cordoned', 'tester', 'bad fan') FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 2), 'draining', 'tester', 'kernel update') FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 3), 'quarantined', 'tester', 'failed burn-in') FROM t;

SELECT is((SELECT count(*)::integer FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 03:00+00', '2030-01-01 04:00+00')),
          0, 'capacity_free: no node with a flag has free atoms');
SELECT throws_ok($$SELECT compute.reserve(pg_temp.request())$$, 'BC409', NULL, 'nothing can be placed while every node has a flag');
SELECT is((SELECT b.state FROM compute.bookings AS b, t WHERE b.reservation_id = t.held), 'held',
          'the booking node 1 held before its cordon stays');

-- Clear one flag at a time: the next request lands on exactly that node.
SELECT ok(compute.node_flag_clear(pgtap_fixtures.node(pool, 3), 'quarantined'), 'quarantine cleared on node 3') FROM t;
SELECT is(pg_temp.node_of(compute.reserve(pg_temp.request())), pgtap_fixtures.node(pool, 3), 'the request lands on node 3') FROM t;
SELECT throws_ok($$SELECT compute.reserve(pg_temp.request())$$, 'BC409', NULL, 'the cordoned and the draining node still get nothing');
SELECT ok(compute.node_flag_clear(pgtap_fixtures.node(pool, 2), 'draining'), 'drain stopped on node 2') FROM t;
SELECT is(pg_temp.node_of(compute.reserve(pg_temp.request())), pgtap_fixtures.node(pool, 2), 'the request lands on node 2') FROM t;
SELECT throws_ok($$SELECT compute.reserve(pg_temp.request())$$, 'BC409', NULL, 'the cordoned node still gets nothing');
SELECT ok(compute.node_flag_clear(pgtap_fixtures.node(pool, 1), 'cordoned'), 'node 1 uncordoned') FROM t;
SELECT is(pg_temp.node_of(compute.reserve(pg_temp.request())), pgtap_fixtures.node(pool, 1), 'the request lands on node 1') FROM t;

SELECT throws_ok($$SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 1), 'retired', 'tester', 'old') FROM t$$,
                 'BC400', 'unknown node flag ''retired''', 'an unknown flag is refused');
SELECT throws_ok($$SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 1), 'cordoned', 'tester', '') FROM t$$,
                 'BC400', 'a flag needs a reason', 'a flag without a reason is refused');

-- An operator cordons through ops, as themselves.
CREATE ROLE pgtap_alice LOGIN IN ROLE bc_operator;
SELECT set_config('pgtap.node', (SELECT n.name FROM compute.nodes AS n, t WHERE n.node_id = pgtap_fixtures.node(t.pool, 2)), true);
SET LOCAL SESSION AUTHORIZATION pgtap_alice;
SELECT ops.node_cordon(current_setting('pgtap.node'), 'PSU alarm');
RESET SESSION AUTHORIZATION;
SELECT results_eq(
    $$SELECT f.flag, f.set_by, f.reason, f.set_at FROM compute.node_flags AS f, t WHERE f.node_id = pgtap_fixtures.node(t.pool, 2)$$,
    $$VALUES ('cordoned'::text, 'pgtap_alice'::text, 'PSU alarm'::text, '2030-01-01 00:00+00'::timestamptz)$$,
    'ops.node_cordon records the operator''s login, the reason and the time');
SELECT is((SELECT o.flags FROM ops.nodes AS o, t WHERE o.node_id = pgtap_fixtures.node(t.pool, 2)), ARRAY['cordoned'],
          'ops.nodes shows the flag');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1, '2030-01-01 05:00+00', '2030-01-01 06:00+00')
                                          || '{"count": 3}')$$,
                 'BC409', NULL, 'three GPUs cannot be placed with node 2 cordoned');

SELECT * FROM finish();
ROLLBACK;
