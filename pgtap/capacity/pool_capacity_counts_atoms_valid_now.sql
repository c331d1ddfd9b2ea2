-- ops.pool_capacity, as an operator reads it: per pool and shape, the atoms valid now, how many are
-- bookable (present GPU, node without flags), held now, held in the future, and on flagged nodes;
-- a layout change moves atoms between shapes when its time comes.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- Two nodes of two GPUs: one GPU booked now until 02:00, both GPUs of node 1 booked 05:00-06:00;
-- node 2 cordoned, its GPU 1 split in two 3g.71gb from 03:00.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 2, 2) AS pool;
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 02:00+00') IS NOT NULL FROM t;
SELECT pgtap_fixtures.book(pool, 'gpu', 2, '2030-01-01 05:00+00', '2030-01-01 06:00+00') IS NOT NULL FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 2), 'cordoned', 'tester', 'bad fan') FROM t;
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 03:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 2) AND d.index = 1;
GRANT SELECT ON t TO bc_operator;
CREATE FUNCTION pg_temp.capacity() RETURNS TABLE (shape text, total bigint, bookable bigint, held_now bigint, held_future bigint,
                                                   cordoned bigint)
LANGUAGE sql AS $$
    SELECT c.shape, c.total, c.bookable, c.held_now, c.held_future, c.cordoned
      FROM ops.pool_capacity AS c, t WHERE c.pool_id = t.pool ORDER BY c.shape
$$;

SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT * FROM pg_temp.capacity()', $$VALUES ('gpu'::text, 4::bigint, 2::bigint, 1::bigint, 2::bigint, 2::bigint)$$,
                  'at 00:00: 4 GPUs, 2 bookable (node 2 cordoned), 1 held now, 2 held later');
RESET ROLE;

SELECT compute.clock_advance('3 hours', true);
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT * FROM pg_temp.capacity()',
                  $$VALUES ('gpu'::text, 3::bigint, 2::bigint, 0::bigint, 2::bigint, 1::bigint),
                           ('mig:3g.71gb', 2, 0, 0, 0, 2)$$,
                  'at 03:00: node 2''s GPU 1 counts as two 3g.71gb, not as a GPU; nothing held now');
RESET ROLE;

SELECT compute.node_flag_clear(pgtap_fixtures.node(pool, 2), 'cordoned') FROM t;
SELECT pgtap_fixtures.book(pool, 'mig:3g.71gb', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00') IS NOT NULL FROM t;
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT * FROM pg_temp.capacity()',
                  $$VALUES ('gpu'::text, 3::bigint, 3::bigint, 0::bigint, 2::bigint, 0::bigint),
                           ('mig:3g.71gb', 2, 2, 1, 0, 0)$$,
                  'uncordoned, node 2 is bookable; one instance held now');
RESET ROLE;

SELECT compute.clock_advance('2 hours 30 minutes', true);
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT shape, held_now, held_future FROM pg_temp.capacity()',
                  $$VALUES ('gpu'::text, 2::bigint, 0::bigint), ('mig:3g.71gb', 0, 0)$$,
                  'at 05:30 the two GPUs booked for 05:00 are held now');
SELECT is((SELECT count(*)::integer FROM ops.pool_capacity AS c, t WHERE c.pool_id = t.pool), 2, 'one row per shape');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
