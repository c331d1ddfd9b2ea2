-- ops.devices: one row per GPU, with its site, pool and node, its layout, its atoms valid now and how
-- many a booking holds now; an operator finds a GPU's uuid there for ops.device_set_layout.
BEGIN;
SELECT plan(3);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 1;
SELECT pgtap_fixtures.book(pool, 'mig:3g.71gb', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00') FROM t;
GRANT SELECT ON t TO bc_operator;

SET LOCAL ROLE bc_operator;
SELECT results_eq($$SELECT d.index, d.layout, d.present, d.atoms, d.atoms_held_now, d.node = n.name, d.critical_conditions
                      FROM ops.devices AS d JOIN ops.nodes AS n ON n.node_id = d.node_id, t
                     WHERE d.pool_id = t.pool ORDER BY d.index$$,
    $$VALUES (0, 'whole'::text, true, 1::bigint, 0::bigint, true, NULL::text[]),
             (1, 'mig:3g.71gb@0,3g.71gb@4', true, 2, 1, true, NULL)$$,
    'each GPU: its layout, its atoms valid now and how many are held');
SELECT is((SELECT count(*) FROM ops.devices AS d, t WHERE d.pool_id = t.pool AND d.device_uuid LIKE 'GPU-%'), 2::bigint,
    'each by its uuid');
SELECT lives_ok($$SELECT ops.device_set_layout((SELECT d.device_uuid FROM ops.devices AS d, t WHERE d.pool_id = t.pool AND d.index = 0),
                                               'timeslice:2')$$,
    'a uuid from ops.devices is what ops.device_set_layout takes');
RESET ROLE;
SELECT * FROM finish();
ROLLBACK;
