-- A node's events (registered, flags) belong to the tenant whose site holds the node, so they
-- reach that tenant's events and watch stream; an operator's site's nodes belong to nobody.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool_a, pgtap_fixtures.fleet('pack', 1, 1) AS pool_ops \gset
SELECT ops.node_cordon(name, 'fan') FROM compute.nodes WHERE pool_id = :'pool_a';

SELECT is((SELECT array_agg(DISTINCT event_type ORDER BY event_type) FROM compute.outbox AS o
            JOIN compute.nodes AS n ON n.node_id::text = o.aggregate_id WHERE n.pool_id = :'pool_a' AND o.tenant_id = pgtap_fixtures.tenant('A')),
          ARRAY['node.flag_set', 'node.registered'], 'the node''s registration and cordon are tenant A''s events');
SELECT is((SELECT count(*) FROM compute.outbox AS o JOIN compute.nodes AS n ON n.node_id::text = o.aggregate_id
            WHERE n.pool_id = :'pool_ops' AND o.tenant_id IS NOT NULL), 0::bigint, 'an operator''s node''s events are nobody''s');
SELECT is((SELECT count(*) FROM compute.outbox AS o JOIN compute.nodes AS n ON n.node_id::text = o.aggregate_id
            WHERE n.pool_id = :'pool_a' AND o.event_type = 'node.flag_set'), 1::bigint, 'one event per cordon');

SELECT * FROM finish();
ROLLBACK;
