-- Placement follows the pool's policy: pack fills partly used nodes first, spread takes the
-- emptiest node; "used" means booked during the requested window.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.fleet('pack', 3, 2) AS pack, pgtap_fixtures.fleet('spread', 3, 2) AS spread;
-- The node number (1..3, in pool order) of a one-atom reservation.
CREATE FUNCTION pg_temp.node_of(p_doc jsonb) RETURNS integer LANGUAGE sql AS $$
    SELECT (SELECT count(*)::integer FROM compute.nodes AS m WHERE m.pool_id = n.pool_id AND m.rank <= n.rank)
      FROM compute.devices AS d JOIN compute.nodes AS n USING (node_id) WHERE d.uuid = p_doc #>> '{bookings,0,device_uuid}'
$$;
CREATE FUNCTION pg_temp.four_in_a_row(p_pool uuid) RETURNS integer[] LANGUAGE plpgsql AS $$
DECLARE
    v_nodes integer[] := '{}';
BEGIN
    FOR i IN 1..4 LOOP
        v_nodes := v_nodes || pg_temp.node_of(pgtap_fixtures.book(p_pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00'));
    END LOOP;
    RETURN v_nodes;
END
$$;

SELECT is(pg_temp.four_in_a_row(pack), ARRAY[1, 1, 2, 2], 'pack: four one-GPU requests fill node 1, then node 2') FROM t;
-- Spread draws among equally used nodes (equally_used_nodes_of_a_spread_pool_are_taken_in_a_drawn_order.sql):
-- the round is in a drawn order.
SELECT is((SELECT array_agg(x ORDER BY x) FROM unnest(v[1:3]) AS x), ARRAY[1, 2, 3],
          'spread: three one-GPU requests go round the three nodes, the fourth to any of them too')
  FROM (SELECT pg_temp.four_in_a_row(spread) AS v FROM t) AS r WHERE v[4] BETWEEN 1 AND 3;

-- Pack prefers the partly used node even when an empty one comes first in pool order: node 1 empty,
-- node 2 with one GPU booked, in 03:00-04:00.
SELECT compute.node_flag_set(pgtap_fixtures.node(pack, 1), 'cordoned', 'tester', 'steer') FROM t;
SELECT is(pg_temp.node_of(pgtap_fixtures.book(pack, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), 2,
          'setup: one GPU of node 2 booked') FROM t;
SELECT compute.node_flag_clear(pgtap_fixtures.node(pack, 1), 'cordoned') FROM t;
SELECT is(pg_temp.node_of(pgtap_fixtures.book(pack, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), 2,
          'pack: the next GPU lands on the partly used node 2, not the empty node 1') FROM t;

-- Spread takes the emptiest node even when a busier one comes first: in 03:00-04:00 node 1 has one
-- GPU booked, node 2 none; a booking outside the window does not count. (Nodes steered by cordons:
-- spread draws among equally used nodes.)
SELECT compute.node_flag_set(pgtap_fixtures.node(spread, n), 'cordoned', 'tester', 'steer') FROM t, generate_series(2, 3) AS n;
SELECT pgtap_fixtures.book(spread, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00') IS NOT NULL FROM t;
SELECT compute.node_flag_clear(pgtap_fixtures.node(spread, 2), 'cordoned') FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(spread, 1), 'cordoned', 'tester', 'steer') FROM t;
SELECT pgtap_fixtures.book(spread, 'gpu', 2, '2030-01-01 05:00+00', '2030-01-01 06:00+00', '{"same_node": true}') IS NOT NULL FROM t;
SELECT compute.node_flag_clear(pgtap_fixtures.node(spread, 1), 'cordoned') FROM t;
SELECT is(pg_temp.node_of(pgtap_fixtures.book(spread, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), 2,
          'spread: the next GPU lands on node 2, empty in the window (its bookings at 05:00 do not count)') FROM t;
SELECT compute.node_flag_clear(pgtap_fixtures.node(spread, 3), 'cordoned') FROM t;
SELECT is(pg_temp.node_of(pgtap_fixtures.book(spread, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), 3,
          'and the one after on node 3, empty once uncordoned') FROM t;

SELECT * FROM finish();
ROLLBACK;
