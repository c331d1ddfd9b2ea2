-- An allowed mutation is applied, audited (one row: principal, reason, matched statements,
-- request hash) and emits its event, all in the admitting transaction.
BEGIN;
SELECT plan(6);

SELECT api.prepare('sites.create', pgtap_fixtures.tenant('A'), '{"name": "berlin"}') AS prepared \gset
SELECT api.admit((:'prepared'::jsonb ->> 'admission_id')::uuid,
                 '{"allowed": true, "reason": "allowed by statement 0", "matched": [{"index": 0}], "principal": "user:alice"}') AS answer \gset

SELECT is(:'answer'::jsonb #>> '{data,name}', 'berlin', 'the answer is the new site');
SELECT is(:'answer'::jsonb #>> '{data,site_id}', :'prepared'::jsonb #>> '{iam,resource,id}',
          'the site has the id IAM decided on');
SELECT is((SELECT tenant_id FROM compute.sites WHERE name = 'berlin'), pgtap_fixtures.tenant('A'), 'the site is the tenant''s');
SELECT results_eq($$SELECT principal, decision, reason, matched, request_hash IS NOT NULL
                      FROM compute.audit_events WHERE action = 'compute:sites:create'$$,
                  $$VALUES ('user:alice', 'allow', 'allowed by statement 0', '[{"index": 0}]'::jsonb, true)$$,
                  'one audit row with the admission context');
SELECT is((SELECT count(*) FROM compute.outbox WHERE event_type = 'site.created' AND tenant_id = pgtap_fixtures.tenant('A')),
          1::bigint, 'one site.created event of the tenant');
SELECT is(api.admit((:'prepared'::jsonb ->> 'admission_id')::uuid, '{"allowed": true, "principal": "user:alice"}') -> 'data',
          :'answer'::jsonb -> 'data', 'admitting again answers the stored result and applies nothing twice');

SELECT * FROM finish();
ROLLBACK;
