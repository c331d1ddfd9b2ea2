-- A webhook URL must be one the sender (urllib) can parse: 'http://[x' and 'http://[1.2.3.4]/'
-- passed the old rule (http(s), no spaces) and then made every delivery raise ValueError in the
-- worker. The rule is compute.webhook_url_valid, in webhook_create and in the table's CHECK.
BEGIN;
SELECT plan(19);

SELECT ok(compute.webhook_url_valid('https://hooks.example.com/bc?x=1#f'), 'a DNS name with path, query and fragment is valid');
SELECT ok(compute.webhook_url_valid('http://hooks.example.com.:8443'), 'a fully qualified name with a port and no path is valid');
SELECT ok(compute.webhook_url_valid('http://192.0.2.10/hook'), 'an IPv4 address is valid');
SELECT ok(compute.webhook_url_valid('http://[2001:db8::1]:8080/hook'), 'a bracketed IPv6 address with a port is valid');
SELECT ok(compute.webhook_url_valid('http://[::ffff:192.0.2.1]/'), 'an IPv4-mapped IPv6 address in brackets is valid');
SELECT ok(compute.webhook_url_valid('http://internal_hooks/x'), 'an internal name with an underscore is valid');

SELECT ok(NOT compute.webhook_url_valid('http://[x'), 'an unclosed bracket is not');
SELECT ok(NOT compute.webhook_url_valid('http://[::1/hook'), 'an IPv6 address without its closing bracket is not');
SELECT ok(NOT compute.webhook_url_valid('http://[1.2.3.4]/'), 'an IPv4 address in brackets is not');
SELECT ok(NOT compute.webhook_url_valid('http://[fe80::zz]/'), 'a bracketed literal that is no IPv6 address is not');
SELECT ok(NOT compute.webhook_url_valid('http://user:pw@hooks.example.com/'), 'user information is not');
SELECT ok(NOT compute.webhook_url_valid('http://hooks.example.com:0/'), 'port 0 is not');
SELECT ok(NOT compute.webhook_url_valid('http://hooks.example.com:65536/'), 'port 65536 is not');
SELECT ok(NOT compute.webhook_url_valid('http://' || repeat('a', 64) || '.example.com/'), 'a label of 64 characters is not');
SELECT ok(NOT compute.webhook_url_valid('http://bücher.example/'), 'a host that is not ASCII is not (use its punycode name)');
SELECT ok(NOT compute.webhook_url_valid('http://hooks.example.com/a' || chr(1)), 'a control character is not');
SELECT ok(NOT compute.webhook_url_valid('http:///hook'), 'an empty host is not');

SELECT throws_ok($$SELECT compute.webhook_create('00000000-0000-0000-0000-000000000001', 'http://[x', pgtap_fixtures.sealed_secret())$$,
                 'BC400', NULL, 'webhook_create refuses it as INVALID_ARGUMENT');
SELECT pgtap_fixtures.sealed_secret() AS sealed \gset
SELECT throws_ok(format($$INSERT INTO compute.webhooks (webhook_id, tenant_id, url, secret_key_id, secret_sealed, created_at)
                          SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'http://[x', s.key_id, s.box, now()
                            FROM compute.sealed_secret_parse(%L) AS s$$, :'sealed'),
                 '23514', NULL, 'the table refuses it too, whoever writes the row');

SELECT * FROM finish();
ROLLBACK;
