-- A scheduled MIG change whose instance was booked and then cancelled can still be called off: the
-- void booking of an atom that will never exist goes with it, and the whole GPU stays bookable.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
CREATE TEMP TABLE d ON COMMIT DROP AS SELECT device_id FROM compute.devices WHERE node_id = pgtap_fixtures.node((SELECT pool FROM t), 1);
SELECT compute.device_set_layout((SELECT device_id FROM d), 'mig:3g.71gb@0,3g.71gb@4', '2030-01-02 00:00+00');
SELECT compute.reservation_release((pgtap_fixtures.book((SELECT pool FROM t), 'mig:3g.71gb', 1, '2030-01-03 00:00+00',
                                                         '2030-01-03 04:00+00') ->> 'reservation_id')::uuid);

SELECT lives_ok($$SELECT compute.device_set_layout((SELECT device_id FROM d), 'whole')$$,
                'calling the MIG change off succeeds although one of its instances had a (cancelled) booking');
SELECT is((SELECT count(*)::integer FROM compute.atoms WHERE device_id = (SELECT device_id FROM d) AND kind = 'mig'), 0,
          'the MIG atoms that never came to be are gone');
SELECT is((SELECT count(*)::integer FROM compute.bookings WHERE device_id = (SELECT device_id FROM d)), 0,
          'with their void booking');
SELECT is(pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-03 00:00+00', '2030-01-03 04:00+00') ->> 'state', 'active',
          'the whole GPU is bookable on 2030-01-03');

SELECT * FROM finish();
ROLLBACK;
