-- api.catalog_links: a creating method's answer id (under the key its type's methods take it by)
-- leads to every other method whose input has that key; these are the OpenAPI document's links.
BEGIN;
SELECT plan(5);

SELECT set_has(
    $$SELECT method || ' -> ' || target || ' by ' || key FROM api.catalog_links()$$,
    $$VALUES ('sites.create -> pools.create by site_id'), ('pools.create -> quotas.set by pool_id'),
             ('pools.create -> reservations.create by pool_id'), ('reservations.create -> reservations.release by reservation_id'),
             ('joinTokens.create -> joinTokens.revoke by token_id'), ('webhooks.create -> webhooks.replay by webhook_id')$$,
    'created sites, pools, reservations, join tokens and webhooks lead to the methods that take their ids');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l JOIN api.methods AS m ON m.method = l.method
       WHERE m.kind <> 'mutation' OR m.resource_key IS NOT NULL$$,
    'only creating methods (mutations not on an existing resource) have links');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l JOIN api.methods AS t ON t.method = l.target
       WHERE NOT t.input_schema -> 'properties' ? l.key OR l.target = l.method$$,
    'every target takes the key in its input, and no method links to itself');
SELECT is_empty(
    $$SELECT l.* FROM api.catalog_links() AS l WHERE l.method IN ('projects.create', 'offerings.create')$$,
    'types no method takes by id (projects, offerings) have no links');
SELECT ok(has_function_privilege('bc_api', 'api.catalog_links()', 'EXECUTE'), 'the relay (bc_api) may read the links');

SELECT * FROM finish();
ROLLBACK;
