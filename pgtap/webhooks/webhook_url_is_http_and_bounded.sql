-- A webhook URL is http(s), without spaces, at most 2000 characters (a regex bound {1,2000} would
-- not even compile: PostgreSQL's repetition counts stop at 255).
BEGIN;
SELECT plan(5);

SELECT lives_ok($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', 'https://hooks.example.com/bc', pgtap_fixtures.sealed_secret())$$,
                'an https URL is accepted');
SELECT lives_ok(format($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', %L, pgtap_fixtures.sealed_secret())$$,
                       'http://example.com/' || repeat('p', 2000 - length('http://example.com/'))),
                'a URL of 2000 characters is accepted');
SELECT throws_ok(format($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', %L, pgtap_fixtures.sealed_secret())$$,
                        'http://example.com/' || repeat('p', 2001 - length('http://example.com/'))),
                 'BC400', NULL, 'a URL of 2001 characters is INVALID_ARGUMENT');
SELECT throws_ok($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', 'ftp://example.com/x', pgtap_fixtures.sealed_secret())$$,
                 'BC400', NULL, 'another scheme is INVALID_ARGUMENT');
SELECT throws_ok($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', 'https://example.com/a b', pgtap_fixtures.sealed_secret())$$,
                 'BC400', NULL, 'a URL with a space is INVALID_ARGUMENT');

SELECT * FROM finish();
ROLLBACK;
