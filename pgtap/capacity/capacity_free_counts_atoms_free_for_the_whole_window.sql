-- compute.capacity_free lists, per node in pool order, the atoms of a shape that are free and
-- schedulable for the whole window: a booking overlapping any part of the window takes its atom
-- out, a MIG booking takes out its own instance only, and atoms that begin or end within the
-- window do not count. What is free can still be booked: a window's past part is not asked about,
-- and a window that has ended is INVALID_ARGUMENT.
BEGIN;
SELECT plan(13);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 2, 2) AS pool;
ALTER TABLE t ADD COLUMN booked uuid;
-- Node 1's GPU 0 booked 01:00-03:00.
UPDATE t SET booked = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 03:00+00') #>> '{bookings,0,atom_id}')::uuid;
CREATE FUNCTION pg_temp.free(p_shape text, p_start timestamptz, p_end timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(split_part(f.node_name, '-', 2) || ':' || f.free_atoms, ' ' ORDER BY f.node_name), '')
      FROM t, compute.capacity_free(t.pool, p_shape, p_start, p_end) AS f
$$;

SELECT is(pg_temp.free('gpu', '2030-01-01 00:00+00', '2030-01-01 01:00+00'), '1:2 2:2', 'before the booking: all four GPUs');
SELECT is(pg_temp.free('gpu', '2030-01-01 02:59+00', '2030-01-01 04:00+00'), '1:1 2:2', 'overlapping its last minute: three');
SELECT is(pg_temp.free('gpu', '2030-01-01 03:00+00', '2030-01-01 04:00+00'), '1:2 2:2', 'from its end: four again');
SELECT ok((SELECT NOT (t.booked = ANY (f.atom_ids)) AND cardinality(f.atom_ids) = 1
             FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 00:00+00', '2030-01-01 04:00+00') AS f
            WHERE f.node_id = pgtap_fixtures.node(t.pool, 1)),
          'the atom ids listed for node 1 are its other GPU''s, not the booked one');
SELECT is(pg_temp.free('mig:3g.71gb', '2030-01-01 00:00+00', '2030-01-01 01:00+00'), '', 'no GPU is split: no 3g.71gb anywhere');

-- Node 2's GPU 1 split in two 3g.71gb from 05:00.
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 05:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 2) AND d.index = 1;
SELECT is(pg_temp.free('mig:3g.71gb', '2030-01-01 05:00+00', '2030-01-01 06:00+00'), '2:2', 'from 05:00 node 2 has two 3g.71gb');
SELECT is(pg_temp.free('mig:3g.71gb', '2030-01-01 04:00+00', '2030-01-01 06:00+00'), '', 'none for a window that begins before the split');
SELECT is(pg_temp.free('gpu', '2030-01-01 04:00+00', '2030-01-01 06:00+00'), '1:2 2:1', 'and the split GPU is not whole for it either');
SELECT pgtap_fixtures.book(pool, 'mig:3g.71gb', 1, '2030-01-01 05:00+00', '2030-01-01 06:00+00') IS NOT NULL FROM t;
SELECT is(pg_temp.free('mig:3g.71gb', '2030-01-01 05:30+00', '2030-01-01 07:00+00'), '2:1', 'one instance booked: the other is free');

SELECT throws_ok($$SELECT * FROM compute.capacity_free((SELECT pool FROM t), 'gpu', '2030-01-01 02:00+00', '2030-01-01 02:00+00')$$,
                 'BC400', NULL, 'an empty window is INVALID_ARGUMENT');

-- At 02:00 the booking (01:00-03:00) still holds node 1's GPU 0; at 03:30 it is over, and a window
-- that began at 00:00 asks about 03:30-04:00 only.
SELECT compute.clock_pin('2030-01-01 02:00+00', true);
SELECT is(pg_temp.free('gpu', '2030-01-01 00:00+00', '2030-01-01 04:00+00'), '1:1 2:2', 'at 02:00, a window from 00:00: three');
SELECT compute.clock_pin('2030-01-01 03:30+00', true);
SELECT is(pg_temp.free('gpu', '2030-01-01 00:00+00', '2030-01-01 04:00+00'), '1:2 2:2', 'at 03:30, the same window: four (its past is not asked about)');
SELECT throws_ok($$SELECT * FROM compute.capacity_free((SELECT pool FROM t), 'gpu', '2030-01-01 01:00+00', '2030-01-01 03:00+00')$$,
                 'BC400', NULL, 'a window that has ended is INVALID_ARGUMENT');

SELECT * FROM finish();
ROLLBACK;
