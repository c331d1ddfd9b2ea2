-- An inventory naming a GPU that another node holds is refused, in words that do not say that it
-- exists elsewhere (nor where): a tenant learns nothing about another tenant's fleet from it.
BEGIN;
SELECT plan(2);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.fleet('pack', 1, 1, false, 'aaaaaaaa-0000-4000-8000-000000000001') AS pool_a,
           pgtap_fixtures.fleet('pack', 0, 1, false, 'bbbbbbbb-0000-4000-8000-000000000002') AS pool_b;

-- Tenant B's node reports tenant A's GPU (same uuid: pgtap_fixtures.inventory derives it from the host name).
SELECT throws_ok(format('SELECT compute.node_register(%L, %L, %L)', pool_b, 'intruder',
                        pgtap_fixtures.inventory((SELECT name FROM compute.nodes WHERE pool_id = pool_a), 1)),
                 'BC400', format('GPU %s cannot be registered on node intruder',
                                 (SELECT uuid FROM compute.devices AS d JOIN compute.nodes AS n ON n.node_id = d.node_id WHERE n.pool_id = pool_a)),
                 'the refusal names only the GPU and the node that reported it') FROM t;
SELECT is((SELECT count(*)::integer FROM compute.nodes AS n, t WHERE n.pool_id = pool_b), 0, 'and registers nothing') FROM t;

SELECT * FROM finish();
ROLLBACK;
