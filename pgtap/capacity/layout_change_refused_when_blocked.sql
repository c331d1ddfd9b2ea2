-- A layout change that would take away a booked atom is CAPACITY_CONFLICT, naming the blocking
-- reservations in the HINT; scheduled after they end it is allowed and leaves them in place. The
-- atoms table guarantees the same by itself (atoms_keep_bookings).
BEGIN;
SELECT plan(14);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN device uuid, ADD COLUMN first uuid, ADD COLUMN second uuid;
UPDATE t SET device = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1)),
             first = (pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 03:00+00') ->> 'reservation_id')::uuid,
             second = (pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 05:00+00', '2030-01-01 06:00+00') ->> 'reservation_id')::uuid;

SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 02:00+00') FROM t$$),
          format('BC409: Release or wait for reservations %s, or schedule the change after they end.',
                 (SELECT string_agg(id::text, ', ' ORDER BY id::text) FROM t, unnest(ARRAY[first, second]) AS id)),
          'a change in the middle of a booking is refused, naming both reservations that hold the GPU after it')
  FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'timeslice:2') FROM t$$),
          format('BC409: Release or wait for reservations %s, or schedule the change after they end.',
                 (SELECT string_agg(id::text, ', ' ORDER BY id::text) FROM t, unnest(ARRAY[first, second]) AS id)),
          'so is a change now, before both bookings')
  FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 03:00+00') FROM t$$),
          format('BC409: Release or wait for reservations %s, or schedule the change after they end.', second),
          'a change when the first ends is blocked by the second only')
  FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'mig:7g.141gb@0', '2029-12-31 23:00+00') FROM t$$),
          'BC400: Omit the time to change now, or pass a future time.', 'a change cannot be scheduled in the past');
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'whole', '2030-01-01 02:00+00') FROM t$$),
          'no error', 'a change that keeps the booked atom (whole to whole) is not blocked');

-- The second reservation released (cancelled: it had not started), the change at 03:00 goes through.
SELECT is(compute.reservation_release(second) ->> 'state', 'cancelled', 'the second reservation cancelled') FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 03:00+00') FROM t$$),
          'no error', 'the change scheduled when the first booking ends is allowed');
SELECT results_eq(
    $$SELECT a.shape, a.slices, a.valid FROM compute.atoms AS a, t WHERE a.device_id = t.device ORDER BY lower(a.valid), a.slices$$,
    $$VALUES ('gpu'::text, '[0,8)'::int4range, '[2030-01-01 00:00+00, 2030-01-01 03:00+00)'::tstzrange),
             ('mig:3g.71gb', '[0,4)', '[2030-01-01 03:00+00,)'), ('mig:3g.71gb', '[4,8)', '[2030-01-01 03:00+00,)')$$,
    'the GPU is whole until 03:00, two instances from then');
SELECT results_eq(
    $$SELECT b.state, b.during, a.shape FROM compute.bookings AS b JOIN compute.atoms AS a USING (atom_id), t
       WHERE b.reservation_id = t.first$$,
    $$VALUES ('held'::text, '[2030-01-01 01:00+00, 2030-01-01 03:00+00)'::tstzrange, 'gpu'::text)$$,
    'the first booking is untouched');
SELECT is((SELECT layout || ' since ' || layout_since FROM compute.devices AS d, t WHERE d.device_id = t.device),
          'mig:3g.71gb@0,3g.71gb@4 since 2030-01-01 03:00:00+00', 'the device records the layout and when it starts');

-- A released booking no longer blocks: release the first at 01:30 and move the change to then.
SELECT compute.clock_advance('90 minutes', true);
SELECT is(compute.reservation_release(first) ->> 'state', 'released', 'the first reservation released at 01:30') FROM t;
SELECT is(pgtap_fixtures.refusal($$SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 01:30+00') FROM t$$),
          'no error', 'the change can now start at 01:30');

-- The table's own guarantee: shrinking a booked atom's validity under its booking is refused.
UPDATE t SET first = (pgtap_fixtures.book(t.pool, 'mig:3g.71gb', 1, '2030-01-01 04:00+00', '2030-01-01 05:00+00')
                      ->> 'reservation_id')::uuid;
SELECT is(pgtap_fixtures.refusal($$UPDATE compute.atoms AS a SET valid = tstzrange(lower(a.valid), '2030-01-01 04:30+00')
                             FROM compute.bookings AS b, t WHERE b.reservation_id = t.first AND a.atom_id = b.atom_id$$),
          format('BC409: Release or wait for reservations %s first.', first),
          'an atom cannot end under a live booking, even by direct UPDATE') FROM t;
SELECT is(pgtap_fixtures.refusal($$DELETE FROM compute.atoms AS a USING compute.bookings AS b, t
                             WHERE b.reservation_id = t.first AND a.atom_id = b.atom_id$$),
          format('BC409: Release or wait for reservations %s first.', first),
          'nor be deleted') FROM t;

SELECT * FROM finish();
ROLLBACK;
