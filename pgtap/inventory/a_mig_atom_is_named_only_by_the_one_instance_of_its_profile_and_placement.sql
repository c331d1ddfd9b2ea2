-- A MIG atom's CDI name is the MIG UUID of the one MIG device the node reports on that GPU with the
-- atom's profile and placement, and nothing else: after the GPU is re-laid to 1g.18gb@0..3 while
-- the old 3g.71gb instance (slices 0-3) is still on the node, the 1g.18gb@0 atom has no name (the
-- old fallback '<gpu index>:<placement>' named the 3g.71gb instance, and in nvidia-ctk's syntax
-- means '<gpu index>:<mig device index>'). A legacy UUID (MIG-GPU-<gpu uuid>/<gi>/<ci>, drivers
-- before R470) holds '/', which CDI names cannot: it is named MIG-GPU-<gpu uuid>-gi<gi>-ci<ci>.
-- A GPU instance split into two compute instances is not one device: no name.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 0, 0) AS pool;
ALTER TABLE t ADD COLUMN node uuid, ADD COLUMN gpu text;
UPDATE t SET node = compute.node_register(pool, 'mig-node',
    pgtap_fixtures.inventory('mig-node', 1, 'NVIDIA H200', false,
        '[{"profile": "3g.71gb", "placement": 0, "gi": 1, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000001"},
          {"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000002"}]'));
UPDATE t SET gpu = (SELECT d.uuid FROM compute.devices AS d WHERE d.node_id = t.node);

CREATE FUNCTION pg_temp.cdi(p_placement integer) RETURNS text LANGUAGE sql AS $$
    SELECT compute.atom_cdi_name(a.atom_id) FROM compute.atoms AS a, t
     WHERE a.node_id = t.node AND a.placement = p_placement AND a.valid @> compute.compute_now() $$;

SELECT is(pg_temp.cdi(0), 'nvidia.com/gpu=MIG-00000000-0000-0000-0000-000000000001', 'a reported instance: its MIG UUID');

SELECT compute.device_set_layout(d.device_id, 'mig:1g.18gb@0,1g.18gb@1,1g.18gb@2,1g.18gb@3,3g.71gb@4')
  FROM compute.devices AS d, t WHERE d.node_id = t.node;
SELECT is(pg_temp.cdi(0), NULL, 're-laid: the 1g.18gb@0 atom is not named after the 3g.71gb instance still at slice 0');
SELECT ok(NOT EXISTS (SELECT 1 FROM compute.atoms AS a, t WHERE a.node_id = t.node AND a.valid @> compute.compute_now()
                        AND compute.atom_cdi_name(a.atom_id) ~ '^nvidia\.com/gpu=[0-9]+(:[0-9]+)?$'),
          'no atom has a name of nvidia-ctk''s index syntax');
SELECT is(pg_temp.cdi(4), 'nvidia.com/gpu=MIG-00000000-0000-0000-0000-000000000002', 'the instance that stays keeps its name');

-- The node reports the new layout, with legacy UUIDs and GI 3 split into two compute instances.
SELECT compute.node_register(t.pool, 'mig-node', pgtap_fixtures.inventory('mig-node', 1, 'NVIDIA H200', false,
    jsonb_build_array(
        jsonb_build_object('profile', '1g.18gb', 'placement', 0, 'gi', 7, 'ci', 0, 'uuid', 'MIG-' || t.gpu || '/7/0'),
        jsonb_build_object('profile', '1g.18gb', 'placement', 1, 'gi', 8, 'ci', 0, 'uuid', 'MIG-' || t.gpu || '/8/0'),
        jsonb_build_object('profile', '1g.18gb', 'placement', 1, 'gi', 8, 'ci', 1, 'uuid', 'MIG-' || t.gpu || '/8/1'),
        jsonb_build_object('profile', '1g.18gb', 'placement', 2, 'gi', 9, 'ci', 0, 'uuid', 'MIG x/9'),
        jsonb_build_object('profile', '3g.71gb', 'placement', 4, 'gi', 2, 'ci', 0,
                           'uuid', 'MIG-00000000-0000-0000-0000-000000000002')))) IS NOT NULL FROM t;
SELECT is(pg_temp.cdi(0), 'nvidia.com/gpu=MIG-' || t.gpu || '-gi7-ci0', 'a legacy MIG UUID becomes a CDI name') FROM t;
SELECT is(pg_temp.cdi(1), NULL, 'a GPU instance with two compute instances: no name');
SELECT is(pg_temp.cdi(2), NULL, 'a UUID that makes no CDI name: no name');

SELECT * FROM finish();
ROLLBACK;
