-- reservations.extend and reservations.renew check their input against the reservation as it is
-- now in api.prepare, before IAM is asked and before an admission is written: an end in the past,
-- a window too long, a stale expected_end, a reservation without a lease or one that has ended.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00')) #>> '{data,reservation_id}' AS plain \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 05:00+00', 'hold_seconds', 60)) #>> '{data,reservation_id}' AS leased \gset

SELECT throws_ok(format('SELECT api.prepare(''reservations.extend'', %L, %L)', pgtap_fixtures.tenant('A'),
                        jsonb_build_object('reservation_id', :'plain', 'end', '2029-12-31 23:00+00')),
                 'BC400', 'the new end must come after the start and after now', 'an end in the past');
SELECT throws_ok(format('SELECT api.prepare(''reservations.extend'', %L, %L)', pgtap_fixtures.tenant('A'),
                        jsonb_build_object('reservation_id', :'plain', 'end', '2030-03-01 00:00+00')),
                 'BC400', 'the extended window is too long', 'a window longer than the offering');
SELECT throws_ok(format('SELECT api.prepare(''reservations.extend'', %L, %L)', pgtap_fixtures.tenant('A'),
                        jsonb_build_object('reservation_id', :'plain', 'end', '2030-01-01 06:00+00', 'expected_end', '2030-01-01 04:00+00')),
                 'BC412', NULL, 'a stale expected_end is GENERATION_CONFLICT');
SELECT throws_ok(format('SELECT api.prepare(''reservations.renew'', %L, %L)', pgtap_fixtures.tenant('A'),
                        jsonb_build_object('reservation_id', :'plain')),
                 'BC400', NULL, 'renewing a reservation without a lease');
SELECT is((SELECT count(*)::integer FROM compute.admissions WHERE method IN ('reservations.extend', 'reservations.renew')), 0,
          'no admission was written for any of them');
SELECT ok(api.prepare('reservations.extend', pgtap_fixtures.tenant('A'),
                      jsonb_build_object('reservation_id', :'plain', 'end', '2030-01-01 06:00+00', 'expected_end', '2030-01-01 05:00+00'))
          ->> 'admission_id' IS NOT NULL, 'a good extension is prepared');
SELECT compute.clock_advance(interval '2 minutes', true);
SELECT throws_ok(format('SELECT api.prepare(''reservations.renew'', %L, %L)', pgtap_fixtures.tenant('A'),
                        jsonb_build_object('reservation_id', :'leased')),
                 'BC409', NULL, 'a lapsed lease is CAPACITY_CONFLICT before the decision');

SELECT * FROM finish();
ROLLBACK;
