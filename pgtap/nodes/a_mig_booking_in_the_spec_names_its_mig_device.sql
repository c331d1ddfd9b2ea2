-- A MIG booking in a node's spec carries the MIG UUID of the device it must be (the daemon checks
-- it with the profile and placement against its own inventory) and the CDI name made from it;
-- when the node reports the instance made again (a new UUID), the spec follows with a new generation.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 0, 0, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT compute.node_register(:'pool', 'mig-node', pgtap_fixtures.inventory('mig-node', 1, 'NVIDIA H200', false,
    '[{"profile": "3g.71gb", "placement": 0, "gi": 1, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-000000000001"}]'))
    AS node \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'mig:3g.71gb', 'count', 1, 'end', '2030-01-01 02:00+00')) -> 'data' AS r \gset

SELECT is((SELECT spec -> 'devices' -> 0 ->> 'mig_uuid' FROM compute.node_specs WHERE node_id = :'node'),
          'MIG-00000000-0000-0000-0000-000000000001', 'the spec names the MIG device the booking is');
SELECT is((SELECT spec -> 'devices' -> 0 ->> 'cdi_name' FROM compute.node_specs WHERE node_id = :'node'),
          'nvidia.com/gpu=MIG-00000000-0000-0000-0000-000000000001', 'and exposes it by that UUID');
SELECT generation AS g1 FROM compute.node_specs WHERE node_id = :'node' \gset

SELECT compute.node_register(:'pool', 'mig-node', pgtap_fixtures.inventory('mig-node', 1, 'NVIDIA H200', false,
    '[{"profile": "3g.71gb", "placement": 0, "gi": 1, "ci": 0, "uuid": "MIG-00000000-0000-0000-0000-00000000000a"}]'))
    IS NOT NULL;
SELECT is((SELECT spec -> 'devices' -> 0 ->> 'mig_uuid' FROM compute.node_specs WHERE node_id = :'node'),
          'MIG-00000000-0000-0000-0000-00000000000a', 'the instance made again: the spec names the new device');
SELECT cmp_ok((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), '>', :g1::bigint, 'in a new generation');

SELECT * FROM finish();
ROLLBACK;
