-- A mutation's idempotency key: the same request answers the first result (nothing applied twice);
-- another request under the key is IDEMPOTENCY_MISMATCH; a denied request frees its key.
BEGIN;
SELECT plan(5);

SELECT pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "ml", "idempotency_key": "k1"}') AS first \gset
SELECT is(pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "ml", "idempotency_key": "k1"}'),
          :'first'::jsonb, 'the same key and request answer the first result');
SELECT is((SELECT count(*) FROM compute.audit_events WHERE action = 'compute:projects:create'), 1::bigint, 'applied and audited once');
SELECT throws_ok($$SELECT api.prepare('projects.create', pgtap_fixtures.tenant('A'), '{"name": "other", "idempotency_key": "k1"}')$$,
                 'BC422', NULL, 'another request under the key is IDEMPOTENCY_MISMATCH');
SELECT is(pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "x", "idempotency_key": "k2"}', false) #>> '{error,code}',
          'ACCESS_DENIED', 'a denied request');
SELECT is(pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "y", "idempotency_key": "k2"}') #>> '{data,name}',
          'y', 'frees its key for another request');

SELECT * FROM finish();
ROLLBACK;
