-- A request for several atoms lands on one node when one node has them all free; otherwise on the
-- fewest nodes. same_node = true makes one node a requirement (CAPACITY_CONFLICT when none fits).
-- Within a node, NVLink-connected GPUs are taken first.
BEGIN;
SELECT plan(10);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 4, 2) AS pool;
-- The node numbers (1..4, in pool order) a reservation's bookings are on.
CREATE FUNCTION pg_temp.nodes_of(p_doc jsonb) RETURNS integer[] LANGUAGE sql AS $$
    SELECT array_agg((SELECT count(*)::integer FROM compute.nodes AS m WHERE m.pool_id = n.pool_id AND m.rank <= n.rank) ORDER BY 1)
      FROM jsonb_array_elements(p_doc -> 'bookings') AS b
      JOIN compute.devices AS d ON d.uuid = b ->> 'device_uuid'
      JOIN compute.nodes AS n ON n.node_id = d.node_id
$$;
-- 01:00-02:00, node 1 has one GPU booked.
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00')), ARRAY[1],
          'one GPU: node 1 (pack, pool order)') FROM t;
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 01:00+00', '2030-01-01 02:00+00')), ARRAY[2, 2],
          'two GPUs land together on node 2 rather than across the free GPU of node 1 and another') FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 3, '2030-01-01 01:00+00',
                                                   '2030-01-01 02:00+00', '{"same_node": true}'))$$),
          'BC409: No single node has 3 free atoms of shape gpu for the window (at most 2 on one node); drop same_node or ask for fewer.',
          'same_node with three GPUs: CAPACITY_CONFLICT, no node has three');
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 01:00+00', '2030-01-01 02:00+00', '{"same_node": true}')),
          ARRAY[3, 3], 'same_node with two GPUs: node 3') FROM t;
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 01:00+00', '2030-01-01 02:00+00', '{"same_node": true}')),
          ARRAY[4, 4], 'and again: node 4') FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 2, '2030-01-01 01:00+00',
                                                   '2030-01-01 02:00+00', '{"same_node": true}'))$$),
          'BC409: All busy: only 1 of 8 schedulable atoms of shape gpu are free for the whole window; compute.capacity_earliest finds the next window.',
          'two GPUs once only one is free (on node 1): all busy');

-- 03:00-04:00, nodes 1 and 2 have one GPU booked each (node 1 cordoned while node 2 is booked).
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00') IS NOT NULL FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 1), 'cordoned', 'tester', 'steer the next booking') FROM t;
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), ARRAY[2],
          'setup: one GPU of node 2 booked') FROM t;
SELECT compute.node_flag_clear(pgtap_fixtures.node(pool, 1), 'cordoned') FROM t;
SELECT is(pg_temp.nodes_of(pgtap_fixtures.book(pool, 'gpu', 4, '2030-01-01 03:00+00', '2030-01-01 04:00+00')), ARRAY[3, 3, 4, 4],
          'four GPUs take the fewest nodes, 3 and 4, not the half-used nodes 1 and 2 first') FROM t;

-- NVLink: on a 4-GPU node where only GPUs 1 and 3 are linked, two GPUs are 1 and 3 (not 0 and 1).
CREATE TEMP TABLE nv ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 0, 0) AS pool, pgtap_fixtures.inventory('nv-node', 4) AS doc;
UPDATE nv SET doc = jsonb_set(jsonb_set(doc, '{devices,1,nvlink_peers}', jsonb_build_array(doc #> '{devices,3,uuid}')),
                              '{devices,3,nvlink_peers}', jsonb_build_array(doc #> '{devices,1,uuid}'));
SELECT compute.node_register(pool, 'nv-node', doc) IS NOT NULL FROM nv;
CREATE FUNCTION pg_temp.gpus_of(p_doc jsonb) RETURNS integer[] LANGUAGE sql AS $$
    SELECT array_agg(d.index ORDER BY d.index)
      FROM jsonb_array_elements(p_doc -> 'bookings') AS b JOIN compute.devices AS d ON d.uuid = b ->> 'device_uuid'
$$;
SELECT is(pg_temp.gpus_of(pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 00:00+00', '2030-01-01 01:00+00')), ARRAY[1, 3],
          'two GPUs of one node: the NVLink-connected pair') FROM nv;
SELECT is(pg_temp.gpus_of(pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 00:00+00', '2030-01-01 01:00+00')), ARRAY[0, 2],
          'the next two take the rest') FROM nv;

SELECT * FROM finish();
ROLLBACK;
