-- A join token's secret is answered once: only its SHA-256 is stored; lists, replays, the audit and
-- the event never carry it.
BEGIN;
SELECT plan(5);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'),
                          jsonb_build_object('pool_id', :'pool', 'idempotency_key', 'mint-1')) -> 'data' AS minted \gset

SELECT ok(:'minted'::jsonb ->> 'token' ~ '^bcjt_[0-9a-f]{64}$', 'the answer carries the secret');
SELECT is((SELECT token_sha256 FROM compute.join_tokens), sha256(convert_to(:'minted'::jsonb ->> 'token', 'UTF8')), 'the table keeps its hash');
SELECT ok(NOT (pgtap_fixtures.api('joinTokens.list', pgtap_fixtures.tenant('A'), '{}') -> 'data' -> 0 ? 'token'), 'a list does not carry it');
SELECT ok(NOT (pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'),
                                  jsonb_build_object('pool_id', :'pool', 'idempotency_key', 'mint-1')) -> 'data' ? 'token'),
          'a replay does not carry it');
SELECT is((SELECT count(*) FROM compute.outbox WHERE payload::text LIKE '%' || (:'minted'::jsonb ->> 'token') || '%')
        + (SELECT count(*) FROM compute.admissions WHERE result::text LIKE '%' || (:'minted'::jsonb ->> 'token') || '%'),
          0::bigint, 'no event or stored result carries it');

SELECT * FROM finish();
ROLLBACK;
