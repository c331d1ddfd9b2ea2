-- A denied read writes one audit event (principal, action, resource, reason) that commits with the
-- refusal: api.read answers the error envelope instead of raising, which would roll the audit back.
-- An allowed read is not audited (docs/api.md: what is audited).
BEGIN;
SELECT plan(6);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset

SELECT is(api.read('pools.get', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool'),
                   '{"allowed": false, "reason": "no statement allows", "matched": [], "principal": "user:mallory"}') #>> '{error,code}',
          'ACCESS_DENIED', 'a denied read answers ACCESS_DENIED');
SELECT is((SELECT jsonb_build_object('principal', principal, 'action', action, 'resource', resource_type || '/' || resource_id,
                                     'decision', decision, 'reason', reason, 'method', context ->> 'method')
             FROM compute.audit_events WHERE tenant_id = pgtap_fixtures.tenant('A') AND decision = 'deny'),
          jsonb_build_object('principal', 'user:mallory', 'action', 'compute:pools:get', 'resource', 'compute-pool/' || :'pool',
                             'decision', 'deny', 'reason', 'no statement allows', 'method', 'pools.get'),
          'it is audited: principal, action, resource, decision, reason');

SELECT ok(api.read('pools.list', pgtap_fixtures.tenant('A'), '{}',
                   '{"allowed": false, "reason": "unknown credential", "matched": []}') ? 'error',
          'a deny without a principal (IAM did not know the credential) is refused too');
SELECT is((SELECT count(*)::integer FROM compute.audit_events
            WHERE tenant_id = pgtap_fixtures.tenant('A') AND action LIKE 'compute:pools:%' AND principal = 'unknown' AND resource_id = '*'),
          1, '... and audited as principal unknown on every resource');

SELECT count(*) AS before FROM compute.audit_events \gset
SELECT is(api.read('pools.get', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool'),
                   '{"allowed": true, "reason": "ok", "matched": [], "principal": "user:alice"}') #>> '{data,pool_id}',
          :'pool', 'an allowed read answers {data}');
SELECT is((SELECT count(*) FROM compute.audit_events), :before::bigint, '... and is not audited');

SELECT * FROM finish();
ROLLBACK;
