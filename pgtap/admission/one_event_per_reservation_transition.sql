-- A reservation's events are one per transition, however many atoms it books: created, activated,
-- extended, released; no event per booking.
BEGIN;
SELECT plan(2);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 4, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 3, 'end', '2030-01-01 02:00+00')) #>> '{data,reservation_id}' AS r \gset
SELECT is((SELECT array_agg(event_type ORDER BY event_id) FROM compute.outbox WHERE aggregate_id = :'r'),
          ARRAY['reservation.created', 'reservation.activated'], 'three atoms reserved and activated: two events');

SELECT compute.reservation_extend(:'r', '2030-01-01 03:00+00');
SELECT compute.clock_advance(interval '1 hour', true);
SELECT compute.reservation_release(:'r');
SELECT is((SELECT array_agg(event_type ORDER BY event_id) FROM compute.outbox WHERE aggregate_id = :'r'),
          ARRAY['reservation.created', 'reservation.activated', 'reservation.extended', 'reservation.released'],
          'then one for the extension and one for the release');

SELECT * FROM finish();
ROLLBACK;
