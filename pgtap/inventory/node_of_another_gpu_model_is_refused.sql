-- A pool holds one GPU model: a node reporting any GPU of another model is refused whole
-- (INVALID_ARGUMENT naming the model and the GPU), and nothing of it is registered.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN pool_name text;
UPDATE t SET pool_name = (SELECT p.name FROM compute.pools AS p WHERE p.pool_id = t.pool);

SELECT throws_ok(format($$SELECT compute.node_register(%L, 'a100-node', pgtap_fixtures.inventory('a100-node', 2, 'NVIDIA A100-SXM4-80GB'))$$, pool),
                 'BC400', format('node a100-node has a NVIDIA A100-SXM4-80GB (GPU 0) but pool %s takes NVIDIA H200 only', pool_name),
                 'a node of A100s is refused by an H200 pool')
  FROM t;
-- Two H200s and, at index 2, an H100: the one odd GPU refuses the whole node.
SELECT throws_ok(format($$SELECT compute.node_register(%L, 'mixed-node',
                            jsonb_set(pgtap_fixtures.inventory('mixed-node', 3), '{devices,2,model}', '"NVIDIA H100 80GB HBM3"'))$$, pool),
                 'BC400', format('node mixed-node has a NVIDIA H100 80GB HBM3 (GPU 2) but pool %s takes NVIDIA H200 only', pool_name),
                 'one GPU of another model among H200s refuses the node')
  FROM t;
SELECT is((SELECT count(*)::integer FROM compute.nodes AS n WHERE n.name IN ('a100-node', 'mixed-node')), 0, 'neither node was registered');
SELECT is((SELECT count(*)::integer FROM compute.devices AS d
            WHERE d.uuid IN (SELECT g ->> 'uuid' FROM jsonb_array_elements(pgtap_fixtures.inventory('a100-node', 2) -> 'devices'
                                                                           || pgtap_fixtures.inventory('mixed-node', 3) -> 'devices') AS g)),
          0, 'nor any of their GPUs, the H200s of the mixed node included');

-- An H200 node already registered cannot come back with another model's GPU either.
SELECT throws_ok(format($$SELECT compute.node_register(%L, n.name, jsonb_set(n.inventory, '{devices,0,model}', '"NVIDIA H100 80GB HBM3"'))
                           FROM compute.nodes AS n WHERE n.node_id = pgtap_fixtures.node(%L, 1)$$, pool, pool),
                 'BC400', NULL, 'a registered node reporting another model is refused')
  FROM t;
SELECT is((SELECT array_agg(DISTINCT d.model) FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1)),
          ARRAY['NVIDIA H200'], 'and keeps its H200');
SELECT lives_ok(format($$SELECT compute.node_register(%L, 'h200-node', pgtap_fixtures.inventory('h200-node', 2))$$, pool),
                'an H200 node is accepted') FROM t;

SELECT * FROM finish();
ROLLBACK;
