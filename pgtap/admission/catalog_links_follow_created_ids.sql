-- api.catalog_links: a creating method's answer id (under the key its type's methods take it by)
-- leads to every other method whose input has that key, and so does the first item of a listing
-- method's answer; these are the OpenAPI document's links.
BEGIN;
SELECT plan(7);

SELECT set_has(
    $$SELECT method || ' -> ' || target || ' by ' || key || ' at ' || pointer FROM api.catalog_links()$$,
    $$VALUES ('sites.create -> pools.create by site_id at /data/site_id'), ('pools.create -> quotas.set by pool_id at /data/pool_id'),
             ('pools.create -> reservations.create by pool_id at /data/pool_id'),
             ('reservations.create -> reservations.release by reservation_id at /data/reservation_id'),
             ('joinTokens.create -> joinTokens.revoke by token_id at /data/token_id'),
             ('webhooks.create -> webhooks.replay by webhook_id at /data/webhook_id')$$,
    'created sites, pools, reservations, join tokens and webhooks lead to the methods that take their ids');
SELECT set_has(
    $$SELECT method || ' -> ' || target || ' by ' || key || ' at ' || pointer FROM api.catalog_links()$$,
    $$VALUES ('nodes.list -> nodes.cordon by node_id at /data/0/node_id'), ('nodes.list -> nodes.command by node_id at /data/0/node_id'),
             ('pools.list -> reservations.create by pool_id at /data/0/pool_id'),
             ('reservations.list -> reservations.extend by reservation_id at /data/0/reservation_id'),
             ('webhooks.list -> webhooks.delete by webhook_id at /data/0/webhook_id')$$,
    'a list''s first item leads there too (nodes join through the gateway: no method creates them)');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l JOIN api.methods AS m ON m.method = l.method
       WHERE m.resource_key IS NOT NULL
          OR l.pointer <> CASE m.kind WHEN 'mutation' THEN '/data/' ELSE '/data/0/' END || l.key$$,
    'only methods not on one resource have links: a create''s id at /data/<key>, a list''s first at /data/0/<key>');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l JOIN api.methods AS t ON t.method = l.target
       WHERE NOT t.input_schema -> 'properties' ? l.key OR l.target = l.method$$,
    'every target takes the key in its input, and no method links to itself');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l WHERE l.method IN ('projects.create', 'projects.list', 'offerings.create', 'offerings.list')$$,
    'types no method takes by id (projects, offerings) have no links');
SELECT is_empty($$SELECT l.* FROM api.catalog_links() AS l WHERE l.method = 'events.list'$$, 'nor do events');
SELECT ok(has_function_privilege('bc_api', 'api.catalog_links()', 'EXECUTE'), 'the relay (bc_api) may read the links');

SELECT * FROM finish();
ROLLBACK;
