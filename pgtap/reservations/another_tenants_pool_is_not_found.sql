-- compute.reserve holds tenancy itself, not only api.prepare: a pool of another tenant's site is
-- NOT_FOUND, worded as for a pool that does not exist. A pool of an operator's site (no tenant)
-- is the operator's to book for any tenant (compute.reserve is reachable by no client role).
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.fleet('pack', 1, 2, false, '00000000-0000-0000-0000-000000000002') AS pool_b,
           pgtap_fixtures.fleet('pack', 1, 2) AS pool_operator;

SELECT is(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)',
              pgtap_fixtures.request(pool_b, 'gpu', 1, NULL, '2030-01-01 02:00+00'))),
          'BC404: List the pools in ops.pool_capacity, or create one with compute.pool_create.',
          'tenant 1 cannot book tenant 2''s pool') FROM t;
SELECT is((SELECT count(*)::integer FROM compute.reservations), 0, 'and nothing was written');
SELECT is(compute.reserve(pgtap_fixtures.request(pool_b, 'gpu', 1, NULL, '2030-01-01 02:00+00',
                                                 '{"tenant_id": "00000000-0000-0000-0000-000000000002"}')) ->> 'state',
          'provisional', 'tenant 2 books its own pool') FROM t;
SELECT is(compute.reserve(pgtap_fixtures.request(pool_operator, 'gpu', 1, NULL, '2030-01-01 02:00+00')) ->> 'state',
          'provisional', 'an operator''s pool is booked for tenant 1') FROM t;

SELECT * FROM finish();
ROLLBACK;
