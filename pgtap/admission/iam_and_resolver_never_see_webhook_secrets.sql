-- What Better IAM sees of a webhooks.create, in the authorize request and from the resolver while
-- the admission is pending, holds no secret, not even the sealed one: fields the catalog marks
-- writeOnly are left out of IAM's attributes (policies never read them anyway).
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.tenant('A') AS tenant, pgtap_fixtures.sealed_secret() AS sealed \gset
SELECT api.prepare('webhooks.create', :'tenant', jsonb_build_object('url', 'https://example.com/h', 'sealed_secret', :'sealed',
                                                                    'event_types', '["reservation.*"]'::jsonb)) AS prepared \gset

SELECT is(:'prepared'::jsonb #> '{iam,attributes}', '{"url": "https://example.com/h", "event_types": ["reservation.*"]}',
          'the authorize request carries the url and event types, no secret');
SELECT is(api.resolve('compute-webhook', :'prepared'::jsonb #>> '{iam,resource,id}') -> 'attributes',
          '{"url": "https://example.com/h", "event_types": ["reservation.*"], "provisional": true}',
          'the resolver answers the pending webhook without its secret');
SELECT is((SELECT count(*)::integer FROM api.methods AS m, jsonb_each(m.input_schema -> 'properties') AS p(k, v)
            WHERE m.method = 'webhooks.create' AND v ->> 'writeOnly' = 'true'), 2, 'secret and sealed_secret are writeOnly');

SELECT * FROM finish();
ROLLBACK;
