-- A GPU that a node's latest inventory no longer lists is marked absent: it keeps its row and atoms
-- but gets no new placements until the node reports it again.
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
ALTER TABLE t ADD COLUMN node uuid, ADD COLUMN doc jsonb;
UPDATE t SET node = pgtap_fixtures.node(pool, 1);
UPDATE t SET doc = (SELECT n.inventory FROM compute.nodes AS n WHERE n.node_id = t.node);

-- The node reports again without GPU 1.
SELECT compute.node_register(pool, (SELECT name FROM compute.nodes WHERE node_id = node), doc #- '{devices,1}') IS NOT NULL FROM t;
SELECT results_eq(
    $$SELECT d.index, d.present FROM compute.devices AS d, t WHERE d.node_id = t.node ORDER BY d.index$$,
    $$VALUES (0, true), (1, false)$$,
    'GPU 1 is kept, marked absent');
SELECT is((SELECT gpus::integer FROM ops.nodes AS o, t WHERE o.node_id = t.node), 1, 'ops.nodes counts one GPU present');
SELECT is((SELECT total || '/' || bookable FROM ops.pool_capacity AS c, t WHERE c.pool_id = t.pool AND c.shape = 'gpu'),
          '2/1', 'ops.pool_capacity: two whole-GPU atoms, one bookable');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 2,
                                          '2030-01-01 01:00+00', '2030-01-01 02:00+00'))$$,
                 'BC409', NULL, 'two GPUs cannot be placed');
SELECT is((SELECT array_agg(f.free_atoms) FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 01:00+00', '2030-01-01 02:00+00') AS f),
          ARRAY[1], 'capacity_free counts the present GPU only');
SELECT is(pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00') #>> '{bookings,0,device_uuid}',
          doc #>> '{devices,0,uuid}', 'one GPU lands on the present one') FROM t;

-- Reported again: placed again.
SELECT compute.node_register(pool, (SELECT name FROM compute.nodes WHERE node_id = node), doc) IS NOT NULL FROM t;
SELECT is((SELECT bool_and(d.present) FROM compute.devices AS d, t WHERE d.node_id = t.node), true, 'GPU 1 is present again');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 2, '2030-01-01 03:00+00', '2030-01-01 04:00+00')$$,
                'and two GPUs can be placed');

SELECT * FROM finish();
ROLLBACK;
