-- ops.atom_holders, as an operator reads it: every atom valid now, who holds it now and until when,
-- and who holds it next and from when.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- One node of two GPUs: GPU 0 whole, GPU 1 split in two 3g.71gb. Tenant 1 holds GPU 0 until 02:00
-- and one instance until 01:00; tenant 2 has GPU 0 from 03:00 to 04:00.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
ALTER TABLE t ADD COLUMN pool_name text, ADD COLUMN now_gpu uuid, ADD COLUMN next_gpu uuid, ADD COLUMN now_mig uuid;
UPDATE t SET pool_name = (SELECT p.name FROM compute.pools AS p WHERE p.pool_id = t.pool);
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 1;
UPDATE t SET now_gpu = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 02:00+00') ->> 'reservation_id')::uuid;
UPDATE t SET next_gpu = (pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 03:00+00', '2030-01-01 04:00+00',
                                             '{"tenant_id": "00000000-0000-0000-0000-000000000002"}') ->> 'reservation_id')::uuid;
UPDATE t SET now_mig = (pgtap_fixtures.book(pool, 'mig:3g.71gb', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00') ->> 'reservation_id')::uuid;
GRANT SELECT ON t TO bc_operator;
CREATE FUNCTION pg_temp.holders() RETURNS TABLE (device_index integer, shape text, placement integer, holder text,
                                                  held_until timestamptz, next text, next_from timestamptz)
LANGUAGE sql AS $$
    SELECT h.device_index, h.shape, h.placement,
           CASE h.holder_reservation WHEN t.now_gpu THEN 'now_gpu' WHEN t.now_mig THEN 'now_mig' WHEN t.next_gpu THEN 'next_gpu' END
           || ' of ' || right(h.holder_tenant::text, 1),
           h.held_until,
           CASE h.next_reservation WHEN t.next_gpu THEN 'next_gpu' END || ' of ' || right(h.next_tenant::text, 1),
           h.next_from
      FROM ops.atom_holders AS h, t WHERE h.pool = t.pool_name
     ORDER BY h.device_index, h.placement
$$;

SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT * FROM pg_temp.holders()',
    $$VALUES (0, 'gpu'::text, NULL::integer, 'now_gpu of 1'::text, '2030-01-01 02:00+00'::timestamptz, 'next_gpu of 2'::text,
              '2030-01-01 03:00+00'::timestamptz),
             (1, 'mig:3g.71gb', 0, 'now_mig of 1', '2030-01-01 01:00+00', NULL, NULL),
             (1, 'mig:3g.71gb', 4, NULL, NULL, NULL, NULL)$$,
    'at 00:00: the GPU held until 02:00, next by tenant 2 from 03:00; one instance held until 01:00, one free');
RESET ROLE;

SELECT compute.clock_advance('150 minutes', true);
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT * FROM pg_temp.holders()',
    $$VALUES (0, 'gpu'::text, NULL::integer, NULL::text, NULL::timestamptz, 'next_gpu of 2'::text, '2030-01-01 03:00+00'::timestamptz),
             (1, 'mig:3g.71gb', 0, NULL, NULL, NULL, NULL),
             (1, 'mig:3g.71gb', 4, NULL, NULL, NULL, NULL)$$,
    'at 02:30: nobody holds anything; tenant 2 is next on the GPU');
RESET ROLE;

SELECT compute.clock_advance('1 hour', true);
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT device_index, holder, held_until, next FROM pg_temp.holders() WHERE shape = ''gpu''',
    $$VALUES (0, 'next_gpu of 2'::text, '2030-01-01 04:00+00'::timestamptz, NULL::text)$$,
    'at 03:30 tenant 2 holds the GPU until 04:00, with nobody next');
RESET ROLE;

-- The instances a layout change takes away leave the view when the change happens.
SELECT compute.device_set_layout(d.device_id, 'whole', '2030-01-01 05:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 1;
SELECT compute.clock_advance('90 minutes', true);
SET LOCAL ROLE bc_operator;
SELECT results_eq('SELECT device_index, shape FROM pg_temp.holders()', $$VALUES (0, 'gpu'::text), (1, 'gpu')$$,
                  'at 05:00 GPU 1 is listed whole, its instances no longer');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
