-- compute.reserve checks placement before it books; should the bookings INSERT still lose (the
-- exclusion constraint, 23P01), the caller gets CAPACITY_CONFLICT (BC409), never the constraint's
-- SQLSTATE. Placement is replaced, inside this transaction only, by one that hands out a GPU
-- another reservation already holds: the race, made deterministic.
BEGIN;
SELECT plan(2);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
SELECT pgtap_fixtures.book(pool, 'gpu', 1, NULL, '2030-01-01 02:00+00') IS NOT NULL FROM t;

CREATE OR REPLACE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
RETURNS uuid[] LANGUAGE sql AS $$
    SELECT array_agg(a.atom_id) FROM compute.atoms AS a WHERE a.pool_id = p_pool_id AND a.shape = p_shape;
$$;

SELECT is(left(pgtap_fixtures.refusal(format('SELECT compute.reserve(%L)', pgtap_fixtures.request(pool, 'gpu', 1, NULL, '2030-01-01 01:00+00'))), 5),
          'BC409', 'a booking the constraint refuses is CAPACITY_CONFLICT') FROM t;
SELECT is((SELECT count(*)::integer FROM compute.reservations AS r, t WHERE r.pool_id = t.pool), 1, 'and nothing else was written');

SELECT * FROM finish();
ROLLBACK;
