-- Admissions waiting for their IAM decision are bounded per caller credential (the SHA-256 the
-- relay passes) and per tenant (compute.limits): past either, api.prepare is QUOTA_EXCEEDED before
-- it holds anything. A decision frees the slot; another credential or tenant is not affected, and a
-- credential's bound is its own whatever tenant it claims.
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
UPDATE compute.limits SET value = 2 WHERE name = 'admissions_pending_per_credential';
UPDATE compute.limits SET value = 3 WHERE name = 'admissions_pending_per_tenant';

SELECT encode(sha256('bogus'), 'hex') AS bogus, encode(sha256('alice'), 'hex') AS alice, encode(sha256('bob'), 'hex') AS bob \gset
SELECT pgtap_fixtures.fleet('pack', 1, 4, false, pgtap_fixtures.tenant('A')) AS pool,
       pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('B')) AS pool_b \gset
CREATE TEMP TABLE asks (n integer, credential text, tenant uuid, answer text) ON COMMIT DROP;
CREATE FUNCTION pg_temp.ask(p_n integer, p_credential text, p_tenant uuid) RETURNS text LANGUAGE sql AS $$  -- one reservations.create in the tenant's pool
    SELECT pgtap_fixtures.refusal(format('INSERT INTO asks SELECT %s, %L, %L, api.prepare(''reservations.create'', %L, %L, %L) ->> ''admission_id''',
        p_n, p_credential, p_tenant, p_tenant,
        jsonb_build_object('pool_id', current_setting(CASE WHEN p_tenant = pgtap_fixtures.tenant('A') THEN 't.pool' ELSE 't.pool_b' END), 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00'), p_credential));
$$;
SELECT set_config('t.pool', :'pool', true), set_config('t.pool_b', :'pool_b', true);

SELECT is(pg_temp.ask(1, :'bogus', pgtap_fixtures.tenant('A')) || pg_temp.ask(2, :'bogus', pgtap_fixtures.tenant('A')),
          'no errorno error', 'a credential holds two pending admissions');
SELECT is(pg_temp.ask(3, :'bogus', pgtap_fixtures.tenant('A')),
          'BC429: Wait for an answer before sending more (admissions_pending_per_credential in ops.limits).', 'not three');
SELECT is((SELECT count(*)::integer FROM compute.bookings WHERE state = 'held'), 2, 'the refused one holds nothing');
SELECT is(pg_temp.ask(4, :'alice', pgtap_fixtures.tenant('A')), 'no error', 'another credential of the tenant is not affected');
SELECT is(pg_temp.ask(5, NULL, pgtap_fixtures.tenant('A')),
          'BC429: Send the request again in a few seconds (admissions_pending_per_tenant in ops.limits).',
          'the tenant holds three pending admissions, not four');
SELECT is(pg_temp.ask(6, :'bob', pgtap_fixtures.tenant('B')), 'no error', 'another tenant is not affected');
SELECT is(pg_temp.ask(8, :'bogus', pgtap_fixtures.tenant('B')), 'BC429: Wait for an answer before sending more (admissions_pending_per_credential in ops.limits).',
          'a credential''s bound holds whatever tenant it names');

SELECT api.admit((SELECT answer::uuid FROM asks WHERE n = 1), '{"allowed": false, "reason": "unknown credential"}') ? 'error';
SELECT is(pg_temp.ask(7, :'bogus', pgtap_fixtures.tenant('A')), 'no error', 'a decision frees its slot');
SELECT is((SELECT count(*)::integer FROM compute.admissions WHERE state = 'pending' AND credential_sha256 = :'bogus' AND tenant_id = pgtap_fixtures.tenant('A')),
          2, 'the credential is back at its bound');

SELECT * FROM finish();
ROLLBACK;
