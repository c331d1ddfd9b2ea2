-- Two tenants each have a node-1 (names are unique per site only): an ops.* function given the bare
-- name refuses it, naming both nodes, instead of acting on one of them; site/name or the id picks one.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT compute.site_create('site-a', pgtap_fixtures.tenant('A')) AS site_a,
           compute.site_create('site-b', pgtap_fixtures.tenant('B')) AS site_b;
ALTER TABLE t ADD COLUMN node_a uuid, ADD COLUMN node_b uuid;
UPDATE t SET node_a = compute.node_register(compute.pool_create(site_a, 'pool-a', 'NVIDIA H200', 'pack'), 'node-1',
                                            pgtap_fixtures.inventory('node-1-a')),
             node_b = compute.node_register(compute.pool_create(site_b, 'pool-b', 'NVIDIA H200', 'pack'), 'node-1',
                                            pgtap_fixtures.inventory('node-1-b'));
GRANT SELECT ON t TO bc_operator;

SELECT is(pgtap_fixtures.refusal($$SELECT ops.node_drain('node-1', 'maintenance')$$),
    'BC400: Name the node as site/name (site-a/node-1, site-b/node-1) or by its id (see ops.nodes).',
    'the refusal is INVALID_ARGUMENT and its hint says how to name each one');

SET LOCAL ROLE bc_operator;
SELECT throws_like($$SELECT ops.node_cordon('node-1', 'maintenance')$$,
    '%node-1%2 nodes%site-a%site-b%', 'cordoning a name two sites use is refused, naming the sites');
SELECT is((SELECT count(*) FROM ops.nodes WHERE flags IS NOT NULL), 0::bigint, 'neither node was flagged');
SELECT lives_ok($$SELECT ops.node_cordon('site-b/node-1', 'maintenance')$$, 'site/name picks one node');
SELECT is((SELECT array_agg(node_id) FROM ops.nodes WHERE flags IS NOT NULL), (SELECT ARRAY[node_b] FROM t),
    'only site-b''s node-1 is cordoned');
SELECT lives_ok(format('SELECT ops.node_clear(%L, %L)', (SELECT node_b FROM t), 'cordoned'), 'so does its id');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
