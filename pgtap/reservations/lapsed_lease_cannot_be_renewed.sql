-- A lease that lapsed is over even before the expiry sweep runs: renewing it is CAPACITY_CONFLICT,
-- and the sweep then ends the reservation at hold_until as it would have anyway.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE r ON COMMIT DROP AS
    SELECT (pgtap_fixtures.book(pgtap_fixtures.fleet('pack', 1, 1), 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 08:00+00',
                                '{"hold_seconds": 600}') ->> 'reservation_id')::uuid AS id;

SELECT compute.clock_advance('9 minutes', true);
SELECT is((compute.reservation_renew((SELECT id FROM r)) ->> 'hold_until')::timestamptz, '2030-01-01 00:19+00'::timestamptz,
          'renewed in time (00:09), the lease runs to 00:19');
SELECT compute.clock_advance('11 minutes', true);
SELECT throws_ok($$SELECT compute.reservation_renew((SELECT id FROM r))$$, 'BC409',
                 format('the lease of reservation %s lapsed at 2030-01-01 00:19:00+00', (SELECT id FROM r)),
                 'renewing at 00:20 a lease that lapsed at 00:19 is refused, though no sweep ran');
SELECT is(compute.reservations_expire(), 1, 'the sweep ends it');
SELECT is((SELECT state || ' ' || during::text FROM compute.reservations WHERE reservation_id = (SELECT id FROM r)),
          'expired ["2030-01-01 00:00:00+00","2030-01-01 00:19:00+00")', 'expired, cut at hold_until');

SELECT * FROM finish();
ROLLBACK;
