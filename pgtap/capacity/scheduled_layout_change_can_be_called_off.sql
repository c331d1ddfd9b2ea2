-- A layout change scheduled for T is called off by setting the current layout again before T: the
-- GPU keeps its atoms from then on with no gap at T, and the atoms scheduled for T never exist. A
-- change moved earlier keeps its atoms valid from the new time on.
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN device uuid, ADD COLUMN booked uuid;
UPDATE t SET device = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1));

-- MIG scheduled for 03:00, the whole GPU booked up to then.
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 03:00+00') FROM t;
UPDATE t SET booked = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 03:00+00') ->> 'reservation_id')::uuid;

-- Called off at 01:30 (whole again, now); the booking then released.
SELECT compute.clock_advance('90 minutes', true);
SELECT lives_ok($$SELECT compute.device_set_layout(device, 'whole') FROM t$$, 'setting the current layout again calls the change off');
SELECT results_eq(
    $$SELECT a.shape, a.valid FROM compute.atoms AS a, t WHERE a.device_id = t.device$$,
    $$VALUES ('gpu'::text, '[2030-01-01 00:00+00,)'::tstzrange)$$,
    'the whole-GPU atom stays valid past 03:00 and no MIG atom is left');
SELECT is((SELECT b.during FROM compute.bookings AS b, t WHERE b.reservation_id = t.booked),
          '[2030-01-01 01:00+00, 2030-01-01 03:00+00)'::tstzrange, 'the booking of the GPU is untouched');
SELECT is(compute.reservation_release(booked) ->> 'state', 'released', 'and can be released') FROM t;
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 06:00+00')$$,
                'the whole GPU can be booked across 03:00');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'mig:3g.71gb', 1,
                                          '2030-01-01 07:00+00', '2030-01-01 08:00+00'))$$,
                 'BC409', NULL, 'no MIG instance exists after 03:00');

-- Scheduled for 12:00, then moved to 08:00: the instances exist from 08:00 on, the GPU whole until then.
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 12:00+00') FROM t;
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 08:00+00') FROM t;
SELECT results_eq(
    $$SELECT a.shape, a.slices, a.valid FROM compute.atoms AS a, t WHERE a.device_id = t.device ORDER BY lower(a.valid), a.slices$$,
    $$VALUES ('gpu'::text, '[0,8)'::int4range, '[2030-01-01 00:00+00, 2030-01-01 08:00+00)'::tstzrange),
             ('mig:3g.71gb', '[0,4)', '[2030-01-01 08:00+00,)'), ('mig:3g.71gb', '[4,8)', '[2030-01-01 08:00+00,)')$$,
    'a change moved earlier: whole until 08:00, the instances from 08:00 on');

-- Whole at 20:00 scheduled, then the instances called for at 09:00 again: they stay on past 20:00.
SELECT compute.device_set_layout(device, 'whole', '2030-01-01 20:00+00') FROM t;
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 09:00+00') FROM t;
SELECT results_eq(
    $$SELECT a.shape, a.slices, a.valid FROM compute.atoms AS a, t WHERE a.device_id = t.device ORDER BY lower(a.valid), a.slices$$,
    $$VALUES ('gpu'::text, '[0,8)'::int4range, '[2030-01-01 00:00+00, 2030-01-01 08:00+00)'::tstzrange),
             ('mig:3g.71gb', '[0,4)', '[2030-01-01 08:00+00,)'), ('mig:3g.71gb', '[4,8)', '[2030-01-01 08:00+00,)')$$,
    'the instances go on past 20:00 and the whole GPU scheduled for then never exists');
SELECT is((SELECT array_agg(f.free_atoms) FROM t, compute.capacity_free(t.pool, 'mig:3g.71gb', '2030-01-02 00:00+00', '2030-01-03 00:00+00') AS f),
          ARRAY[2], 'capacity_free sees both instances the day after');

SELECT * FROM finish();
ROLLBACK;
