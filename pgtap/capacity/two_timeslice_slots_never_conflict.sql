-- The slots of a time-sliced GPU share its memory but never its share: any number of them can be
-- booked in the same window, each once; a whole-GPU booking overlapping any of them conflicts.
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN device uuid;
UPDATE t SET device = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1));
SELECT compute.device_set_layout(device, 'timeslice:4') FROM t;

-- Four tenants book one slot each in the same window.
SELECT lives_ok(format($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'slot', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00',
                                                   '{"tenant_id": "00000000-0000-0000-0000-00000000000%s"}')$$, k),
                format('slot booking %s of 4 in one window', k))
  FROM generate_series(1, 4) AS k;
SELECT results_eq(
    $$SELECT a.slot, b.shares FROM compute.bookings AS b JOIN compute.atoms AS a USING (atom_id), t
       WHERE b.device_id = t.device AND b.state = 'held' ORDER BY a.slot$$,
    $$VALUES (0, '[0,1)'::int4range), (1, '[1,2)'), (2, '[2,3)'), (3, '[3,4)')$$,
    'the four bookings hold the four slots of the one GPU, one share each');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'slot', 1,
                                          '2030-01-01 01:30+00', '2030-01-01 02:30+00'))$$,
                 'BC409', NULL, 'a fifth slot overlapping them does not exist');

-- Whole again: not while the slots are booked, from 02:00 yes; and the whole GPU only from then.
SELECT throws_ok($$SELECT compute.device_set_layout(device, 'whole', '2030-01-01 01:30+00') FROM t$$,
                 'BC409', NULL, 'the GPU cannot become whole while its slots are booked');
SELECT compute.device_set_layout(device, 'whole', '2030-01-01 02:00+00') FROM t;
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 01:30+00', '2030-01-01 03:00+00'))$$,
                 'BC409', NULL, 'the whole GPU cannot be reserved over the booked slots');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t), 'gpu', 1, '2030-01-01 02:00+00', '2030-01-01 03:00+00')$$,
                'the whole GPU can be booked once the slots end');

-- The constraint on its own (bookings_match_atom off): a whole-GPU row over a booked slot, or the
-- same share twice, is an exclusion violation; another share is not.
SET LOCAL session_replication_role = replica;
CREATE FUNCTION pg_temp.insert_booking(p_shares int4range, p_during tstzrange)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id,
                                  slices, shares, gpu_fraction, during, state)
    SELECT r.reservation_id, r.tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
           int4range(0, 8), p_shares, 1, p_during, 'held'
      FROM compute.reservations AS r, compute.atoms AS a, t
     WHERE a.device_id = t.device
     ORDER BY r.created_at, a.atom_id LIMIT 1
$$;
SELECT throws_ok($$SELECT pg_temp.insert_booking('[0,)', '[2030-01-01 01:59+00, 2030-01-01 02:00+00)')$$,
                 '23P01', NULL, 'a whole-GPU row overlapping the slots is an exclusion violation');
SELECT throws_ok($$SELECT pg_temp.insert_booking('[2,3)', '[2030-01-01 01:00+00, 2030-01-01 01:01+00)')$$,
                 '23P01', NULL, 'a second booking of slot 2 in the window is an exclusion violation');
SELECT lives_ok($$SELECT pg_temp.insert_booking('[4,5)', '[2030-01-01 01:00+00, 2030-01-01 02:00+00)')$$,
                'another share in the same window is not');

SELECT * FROM finish();
ROLLBACK;
