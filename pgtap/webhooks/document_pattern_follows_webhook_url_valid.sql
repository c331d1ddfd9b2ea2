-- The API document's pattern for webhooks.create's url follows compute.webhook_url_valid: every URL
-- the database takes matches it, and the malformed ones it can express are refused by it too. What
-- a pattern cannot say (a port above 65535, an IPv6 literal that does not parse) the database checks.
BEGIN;
SELECT plan(3);

CREATE TEMP TABLE t ON COMMIT DROP AS
SELECT m.input_schema #>> '{properties,url,pattern}' AS pattern FROM api.methods AS m WHERE m.method = 'webhooks.create';

SELECT is((SELECT pg_catalog.array_agg(u) FROM t, unnest(ARRAY[
               'http://example.com', 'https://example.com/', 'https://hooks.example.com:8443/a/b?c=d#e', 'http://10.0.0.7:80/x',
               'https://[2001:db8::1]/h', 'https://[::ffff:192.0.2.1]:443', 'http://localhost.', 'http://a_b.example/?q=%20'
           ]) AS u WHERE NOT compute.webhook_url_valid(u) OR u !~ t.pattern),
          NULL, 'every URL the database takes matches the document');
SELECT is((SELECT pg_catalog.array_agg(u) FROM t, unnest(ARRAY[
               'ftp://example.com', 'http://', 'http://user:pw@example.com/', 'http://exa mple.com', 'http://example.com/a b',
               'http://[x', 'http://-example.com', 'http://example..com', 'http://example.com:port', 'https://example.com:123456'
           ]) AS u WHERE compute.webhook_url_valid(u) OR u ~ t.pattern),
          NULL, 'malformed URLs are refused by both');
SELECT is((SELECT pg_catalog.array_agg(u ORDER BY u) FROM t, unnest(ARRAY['http://example.com:99999', 'http://[1.2.3.4]/']) AS u
            WHERE u ~ t.pattern AND NOT compute.webhook_url_valid(u)),
          ARRAY['http://[1.2.3.4]/', 'http://example.com:99999'], 'what only the database can check: the port''s range, an IPv6 literal');

SELECT * FROM finish();
ROLLBACK;
