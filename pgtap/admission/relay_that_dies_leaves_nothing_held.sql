-- A relay that dies between prepare and admit: after admission_seconds the sweep ends the
-- admission and voids its provisional reservation; a decision arriving later is FENCED.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT api.prepare('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00')) AS prepared \gset

SELECT compute.clock_advance(compute.limit('admission_seconds') * interval '1 second' + interval '1 second', true);
SELECT is(compute.admissions_expire(), 1, 'the sweep ends the abandoned admission');
SELECT is((SELECT state FROM compute.reservations WHERE reservation_id = (:'prepared'::jsonb #>> '{iam,resource,id}')::uuid),
          'void', 'its reservation is void');
SELECT is((SELECT count(*) FROM compute.bookings WHERE pool_id = :'pool' AND state = 'held'), 0::bigint,
          'nothing is held');
SELECT is(api.admit((:'prepared'::jsonb ->> 'admission_id')::uuid, '{"allowed": true}') #>> '{error,code}', 'FENCED',
          'a late allow is FENCED and activates nothing');

SELECT * FROM finish();
ROLLBACK;
