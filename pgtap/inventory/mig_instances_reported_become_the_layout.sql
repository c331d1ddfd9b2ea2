-- A GPU first reported in MIG mode with instances starts with those instances as its layout (and
-- its atoms); a GPU in MIG mode without instances, or with MIG disabled, starts whole. Registering
-- the node again does not change a known GPU's layout.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 0, 0) AS pool;
ALTER TABLE t ADD COLUMN node uuid;
UPDATE t SET node = compute.node_register(pool, 'mig-node',
    pgtap_fixtures.inventory('mig-node', 2, 'NVIDIA H200', false,
        '[{"profile": "3g.71gb", "placement": 4, "uuid": "MIG-00000000-0000-0000-0000-000000000004"},
          {"profile": "1g.18gb", "placement": 0}, {"profile": "2g.35gb", "placement": 2}]'));

SELECT results_eq(
    $$SELECT d.index, d.layout FROM compute.devices AS d, t WHERE d.node_id = t.node ORDER BY d.index$$,
    $$VALUES (0, 'mig:1g.18gb@0,2g.35gb@2,3g.71gb@4'::text), (1, 'mig:1g.18gb@0,2g.35gb@2,3g.71gb@4')$$,
    'each GPU''s layout is its reported instances, in placement order');
SELECT results_eq(
    $$SELECT a.shape, a.placement, a.slices, a.valid FROM compute.atoms AS a, t WHERE a.node_id = t.node AND a.device_index = 0
       ORDER BY a.slices$$,
    $$VALUES ('mig:1g.18gb'::text, 0, '[0,1)'::int4range, '[2030-01-01 00:00+00,)'::tstzrange),
             ('mig:2g.35gb', 2, '[2,4)', '[2030-01-01 00:00+00,)'), ('mig:3g.71gb', 4, '[4,8)', '[2030-01-01 00:00+00,)')$$,
    'and its atoms those instances, valid from registration');
SELECT is((SELECT count(*)::integer FROM compute.atoms AS a, t WHERE a.node_id = t.node AND a.kind = 'gpu'), 0,
          'no whole-GPU atom on the split GPUs');
SELECT is(compute.atom_cdi_name(a.atom_id), 'nvidia.com/gpu=MIG-00000000-0000-0000-0000-000000000004',
          'a reported MIG uuid names the instance for CDI')
  FROM compute.atoms AS a, t WHERE a.node_id = t.node AND a.device_index = 0 AND a.placement = 4;

-- The node reports again, MIG now disabled: the known GPUs keep their layout (layouts change by
-- device_set_layout, not by a report).
SELECT compute.node_register(pool, 'mig-node', pgtap_fixtures.inventory('mig-node', 2)) IS NOT NULL FROM t;
SELECT is((SELECT array_agg(DISTINCT d.layout) FROM compute.devices AS d, t WHERE d.node_id = t.node),
          ARRAY['mig:1g.18gb@0,2g.35gb@2,3g.71gb@4'], 'a later report does not change a known GPU''s layout');

-- A new node with MIG mode enabled but no instances starts whole.
SELECT compute.node_register(pool, 'empty-mig', jsonb_set(pgtap_fixtures.inventory('empty-mig', 1), '{devices,0,mig,mode}', '"enabled"'))
       IS NOT NULL FROM t;
SELECT is((SELECT d.layout || ' ' || a.shape FROM compute.devices AS d JOIN compute.nodes AS n USING (node_id)
             JOIN compute.atoms AS a USING (device_id) WHERE n.name = 'empty-mig'),
          'whole gpu', 'MIG enabled without instances: whole, one whole-GPU atom');

SELECT * FROM finish();
ROLLBACK;
