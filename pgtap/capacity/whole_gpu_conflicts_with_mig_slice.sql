-- A whole-GPU booking conflicts with a MIG booking of the same GPU in an overlapping window
-- (bookings_exclusive: device, slices, shares, during), and through compute.reserve a window that
-- crosses a scheduled layout change (whole until T, MIG from T) gets neither shape.
BEGIN;
SELECT plan(14);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- One node, one H200, whole until 12:00 and 3g.71gb@0,3g.71gb@4 from then on.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN device uuid;
UPDATE t SET device = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1));
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 12:00+00') FROM t;

-- Through compute.reserve: a window across the change fits neither the GPU nor its instances.
SELECT matches(pgtap_fixtures.refusal($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                                        '2030-01-01 10:00+00', '2030-01-01 14:00+00'))$$),
               '^BC409: Only 0 atoms of shape gpu are schedulable for the whole window \(1 more',
               'a whole GPU cannot be reserved across the change to MIG (CAPACITY_CONFLICT)');
SELECT matches(pgtap_fixtures.refusal($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'mig:3g.71gb', 1,
                                                        '2030-01-01 10:00+00', '2030-01-01 14:00+00'))$$),
               '^BC409: Only 0 atoms of shape mig:3g.71gb are schedulable for the whole window \(2 more',
               'a MIG instance cannot be reserved across the change either: the GPU is whole before it');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 10:00+00', '2030-01-01 12:00+00')$$,
                'the whole GPU can be booked up to the change');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'mig:3g.71gb', 2, '2030-01-01 12:00+00', '2030-01-01 14:00+00')$$,
                'both instances can be booked from the change on');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'mig:3g.71gb', 1,
                                          '2030-01-01 13:00+00', '2030-01-01 15:00+00'))$$,
                 'BC409', NULL, 'a third instance does not exist');

-- The constraint itself. Through atoms a whole-GPU row and a MIG row of one GPU can never overlap in
-- time (atoms_disjoint, and bookings_match_atom keeps a booking inside its atom's validity), so
-- the trigger is switched off here to show that bookings_exclusive holds on its own.
SET LOCAL session_replication_role = replica;
CREATE FUNCTION pg_temp.insert_booking(p_slices int4range, p_during tstzrange, p_state text DEFAULT 'held',
                                       p_device uuid DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id,
                                  slices, shares, gpu_fraction, during, state)
    SELECT r.reservation_id, r.tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
           p_slices, int4range(0, NULL), (upper(p_slices) - lower(p_slices)) / 8.0, p_during, p_state
      FROM compute.reservations AS r, compute.atoms AS a
     WHERE a.device_id = coalesce(p_device, (SELECT device FROM t))
     ORDER BY r.created_at, a.atom_id LIMIT 1
$$;

SELECT lives_ok($$SELECT pg_temp.insert_booking('[0,8)', '[2030-01-02 00:00+00, 2030-01-02 02:00+00)')$$,
                'a whole-GPU booking');
SELECT throws_ok($$SELECT pg_temp.insert_booking('[4,8)', '[2030-01-02 01:00+00, 2030-01-02 03:00+00)')$$,
                 '23P01', NULL, 'a MIG slice of that GPU in an overlapping window is an exclusion violation');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[4,8)', '[2030-01-02 02:00+00, 2030-01-02 03:00+00)')$$,
                'the same MIG slice right after the whole-GPU booking is fine');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[0,4)', '[2030-01-03 00:00+00, 2030-01-03 02:00+00)')$$,
                'a MIG booking');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[4,8)', '[2030-01-03 00:00+00, 2030-01-03 02:00+00)')$$,
                'the other MIG slice in the same window is fine');
SELECT throws_ok($$SELECT pg_temp.insert_booking('[0,8)', '[2030-01-03 01:59+00, 2030-01-03 05:00+00)')$$,
                 '23P01', NULL, 'a whole-GPU booking overlapping a MIG booking by one minute is an exclusion violation');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[0,8)', '[2030-01-03 01:00+00, 2030-01-03 05:00+00)', 'released')$$,
                'a released whole-GPU row overlapping them does not count');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[0,8)', '[2030-01-03 01:00+00, 2030-01-03 05:00+00)', 'void')$$,
                'nor does a void one');
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b, t
            WHERE b.device_id = t.device AND b.state = 'held' AND b.during && '[2030-01-02 00:00+00, 2030-01-04 00:00+00)'),
          4, 'only the four non-overlapping live rows were written');

SELECT * FROM finish();
ROLLBACK;
