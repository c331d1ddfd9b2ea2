-- compute.reserve is what an operator calls directly: whatever it is sent, it answers with a
-- contract code (SQLSTATE class BC), never a constraint's SQLSTATE (23514 for a key the table
-- refuses). The idempotency key has 1 to 200 characters, as in every API method's schema.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.request(pgtap_fixtures.fleet('pack', 1, 2), 'gpu', 1, NULL, '2030-01-01 02:00+00') AS request;

SELECT is(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"idempotency_key": ""}')),
          'BC400: Use 1 to 200 characters, e.g. a uuid.', 'an empty idempotency key is INVALID_ARGUMENT') FROM t;
SELECT is(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || jsonb_build_object('idempotency_key', repeat('k', 201)))),
          'BC400: Use 1 to 200 characters, e.g. a uuid.', 'a key of 201 characters is INVALID_ARGUMENT') FROM t;
SELECT is(compute.reserve(request || jsonb_build_object('idempotency_key', repeat('k', 200))) ->> 'state', 'provisional',
          'a key of 200 characters is taken') FROM t;
SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"idempotency_key": 7}')), 5),
          'BC400', 'a key that is not a string is INVALID_ARGUMENT') FROM t;
SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"hold_seconds": 0}')), 5),
          'BC400', 'a lease of 0 seconds is INVALID_ARGUMENT') FROM t;
SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', request || '{"tenant_id": null}')), 5),
          'BC400', 'a request without a tenant is INVALID_ARGUMENT') FROM t;

SELECT * FROM finish();
ROLLBACK;
