-- A GPU instance split into two compute instances (`nvidia-smi mig -lci` lists CI 0 and CI 1 of one
-- GI) is listed twice in the inventory, once per MIG device: the node still registers and joins,
-- and the GI is the atom (one, not two overlapping ones).
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 0, 0, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT '[{"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000020"},
         {"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 1, "uuid": "MIG-00000000-0000-0000-0000-000000000021"},
         {"profile": "1g.18gb", "placement": 0, "gi": 9, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000090"}]'
       AS split \gset

-- The join first: it makes the layout's temporary table as bc_owner (SECURITY DEFINER), which the
-- test's own role can use after it, and not the other way round.
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool')) -> 'data' AS minted \gset
SELECT '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('ab', 64), 'hex') AS key,
       sha256(convert_to(:'minted'::jsonb ->> 'token', 'UTF8')) AS hashed \gset
SELECT lives_ok(format('SELECT node_api.join_request(%L, %L, %L, %L, %L, %L)', sha256(:'hashed'::bytea),
                       compute.hmac_sha256(:'hashed'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'key'::bytea),
                       pgtap_fixtures.inventory('split-join', 1, 'NVIDIA H200', false, :'split'), :'key'::bytea, 'csr', 'gw-1'),
                'a node with a GPU instance of two compute instances joins with a token');

SELECT lives_ok(format('SELECT compute.node_register(%L, %L, %L)', :'pool', 'split-node',
                       pgtap_fixtures.inventory('split-node', 1, 'NVIDIA H200', false, :'split')),
                'and registers');
SELECT is((SELECT d.layout FROM compute.devices AS d JOIN compute.nodes AS n USING (node_id) WHERE n.name = 'split-node'),
          'mig:1g.18gb@0,3g.71gb@4', 'its layout has the GPU instance once');
SELECT results_eq(
    $$SELECT a.shape, a.slices FROM compute.atoms AS a JOIN compute.nodes AS n USING (node_id)
       WHERE n.name = 'split-node' ORDER BY a.slices$$,
    $$VALUES ('mig:1g.18gb'::text, '[0,1)'::int4range), ('mig:3g.71gb', '[4,8)')$$,
    'one atom per GPU instance');

SELECT * FROM finish();
ROLLBACK;
