-- Better IAM's resolver: a resource's tenant, parent and attributes; a resource being created
-- (its admission pending) is answered too, marked provisional; an unknown id is NOT_FOUND.
BEGIN;
SELECT plan(4);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT api.prepare('offerings.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'max_count', 8, 'max_duration_seconds', 3600)) AS prepared \gset

SELECT is(api.resolve('compute-pool', :'pool') ->> 'tenantId', pgtap_fixtures.tenant('A')::text, 'a pool resolves to its tenant');
SELECT is(api.resolve('compute-offering', :'prepared'::jsonb #>> '{iam,resource,id}'),
          jsonb_build_object('tenantId', pgtap_fixtures.tenant('A'), 'parent', jsonb_build_object('type', 'compute-pool', 'id', :'pool'),
                             'attributes', jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'max_count', 8,
                                                              'max_duration_seconds', 3600, 'provisional', true)),
          'an offering being created resolves with its parent and the exact request');
SELECT throws_ok($$SELECT api.resolve('compute-pool', '00000000-0000-4000-8000-000000000000')$$, 'BC404', NULL, 'an unknown id is NOT_FOUND');
SELECT throws_ok($$SELECT api.resolve('compute-pool', 'not-a-uuid')$$, 'BC404', NULL, 'a malformed id is NOT_FOUND');

SELECT * FROM finish();
ROLLBACK;
