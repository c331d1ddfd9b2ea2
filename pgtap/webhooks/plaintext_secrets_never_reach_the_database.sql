-- A webhook's signing secret reaches the database only sealed to the worker's key (issue 11 C3): a
-- plaintext secret is refused before anything is written, even by break-glass at psql (ops.call),
-- and even by a direct INSERT; a sealed one is stored as its key id and box, nothing else.
BEGIN;
SELECT plan(6);

SELECT pgtap_fixtures.tenant('A') AS tenant, pgtap_fixtures.sealed_secret() AS sealed \gset

SET LOCAL ROLE bc_operator;
SELECT throws_ok(format($$SELECT ops.call('webhooks.create', '{"tenant_id": "%s", "url": "https://example.com/h", "secret": "plain-text-secret-0123"}', 'INC-7')$$,
                        :'tenant'), 'BC400', 'secret reaches the database only sealed', 'a plaintext secret is refused at psql');
RESET ROLE;
SELECT matches(pgtap_fixtures.refusal(format($$SELECT ops.call('webhooks.create', '{"tenant_id": "%s", "url": "https://example.com/h", "secret": "plain-text-secret-0123"}', 'INC-7')$$, :'tenant')),
            '^BC400: .*HTTP relay.*sealed_secret', 'the hint says how to send one');
SELECT is((SELECT count(*)::integer FROM compute.admissions WHERE input::text LIKE '%plain-text-secret%' OR attributes::text LIKE '%plain-text-secret%')
          + (SELECT count(*)::integer FROM compute.webhooks WHERE secret IS NOT NULL), 0, 'nothing holds it: no admission, no webhook');

SET LOCAL ROLE bc_operator;
SELECT ops.call('webhooks.create', jsonb_build_object('tenant_id', :'tenant', 'url', 'https://example.com/h', 'sealed_secret', :'sealed'),
                'INC-7') ->> 'webhook_id' AS hook \gset
RESET ROLE;
SELECT is((SELECT jsonb_build_object('secret', secret, 'key_id', secret_key_id, 'box', 'bcs1:' || secret_key_id || ':' || translate(encode(secret_sealed, 'base64'), E'\n', ''))
             FROM compute.webhooks WHERE webhook_id = :'hook'),
          jsonb_build_object('secret', NULL, 'key_id', split_part(:'sealed', ':', 2), 'box', :'sealed'),
          'a sealed secret is stored as its key id and box, with no plaintext');
SELECT throws_ok(format($$INSERT INTO compute.webhooks (webhook_id, tenant_id, url, secret, created_at)
                          VALUES (gen_random_uuid(), '%s', 'https://example.com/h', 'plain-text-secret-0123', now())$$, :'tenant'),
                 'BC400', NULL, 'a plaintext secret cannot be inserted directly either');
SELECT throws_ok(format($$SELECT ops.call('webhooks.create', '{"tenant_id": "%s", "url": "https://example.com/h", "sealed_secret": "bcs1:0123456789abcdef:%s"}', 'INC-7')$$,
                        :'tenant', split_part(:'sealed', ':', 3)),
                 'BC400', NULL, 'a box sealed to a key no worker registered is refused');

SELECT * FROM finish();
ROLLBACK;
