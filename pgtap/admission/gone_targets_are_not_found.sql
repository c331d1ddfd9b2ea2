-- quotas.get for a project the tenant does not have, and webhooks.replay of a deleted webhook, are
-- NOT_FOUND: they answered a quota of nulls and "replayed: 0", as if all were well.
BEGIN;
SELECT plan(4);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.tenant('A') AS a, pgtap_fixtures.tenant('B') AS b \gset
SELECT (pgtap_fixtures.api('projects.create', :'b', '{"name": "theirs"}') #>> '{data,project_id}') AS theirs \gset
SELECT (pgtap_fixtures.api('projects.create', :'a', '{"name": "ours"}') #>> '{data,project_id}') AS ours \gset

SELECT is(pgtap_fixtures.api('quotas.get', :'a', jsonb_build_object('pool_id', :'pool', 'project_id', :'ours')) #>> '{data,project_id}',
          :'ours', 'a project of the tenant: its quota (none yet)');
SELECT throws_ok(format($$SELECT pgtap_fixtures.api('quotas.get', %L, jsonb_build_object('pool_id', %L, 'project_id', %L))$$, :'a', :'pool', :'theirs'),
                 'BC404', format('no project %s in this tenant', :'theirs'), 'another tenant''s project is NOT_FOUND');

SELECT (pgtap_fixtures.api('webhooks.create', :'a', jsonb_build_object('url', 'https://example.com/h', 'sealed_secret', pgtap_fixtures.sealed_secret())) #>> '{data,webhook_id}') AS hook \gset
SELECT is(pgtap_fixtures.api('webhooks.replay', :'a', jsonb_build_object('webhook_id', :'hook')) #>> '{data,replayed}', '0',
          'replaying a webhook with nothing dead: none');
SELECT pgtap_fixtures.api('webhooks.delete', :'a', jsonb_build_object('webhook_id', :'hook'));
SELECT throws_ok(format($$SELECT pgtap_fixtures.api('webhooks.replay', %L, jsonb_build_object('webhook_id', %L))$$, :'a', :'hook'),
                 'BC404', format('webhook %s was deleted', :'hook'), 'replaying a deleted webhook is NOT_FOUND');

SELECT * FROM finish();
ROLLBACK;
