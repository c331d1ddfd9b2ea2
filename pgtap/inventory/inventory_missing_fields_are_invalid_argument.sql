-- An inventory document missing a required field, or holding one of the wrong type, is
-- INVALID_ARGUMENT naming the field (with its path); fields we do not know are kept as sent.
BEGIN;
SELECT plan(18);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool, pgtap_fixtures.inventory('node-x', 2) AS doc;

CREATE FUNCTION pg_temp.register(p_doc jsonb) RETURNS uuid LANGUAGE sql AS $$
    SELECT compute.node_register((SELECT pool FROM t), 'node-x', p_doc)
$$;
SELECT throws_ok(format('SELECT pg_temp.register(%L)', c.doc), 'BC400', c.message, c.description)
  FROM t, LATERAL (VALUES
    (t.doc #- '{hostname}', 'inventory field hostname is missing or not a string', 'hostname missing'),
    (jsonb_set(t.doc, '{hostname}', '42'), 'inventory field hostname is missing or not a string', 'hostname not a string'),
    (t.doc #- '{version}', 'inventory field version is missing or not a number', 'version missing'),
    (jsonb_set(t.doc, '{version}', '2'), 'inventory version 2 is not supported', 'version 2'),
    (t.doc #- '{devices}', 'inventory field devices is missing or not an array', 'devices missing'),
    (t.doc #- '{devices,1,uuid}', 'inventory field devices[1].uuid is missing or not a string', 'the second GPU''s uuid missing'),
    (t.doc #- '{devices,0,index}', 'inventory field devices[0].index is missing or not a number', 'index missing'),
    (t.doc #- '{devices,0,pci_bus_id}', 'inventory field devices[0].pci_bus_id is missing or not a string', 'pci_bus_id missing'),
    (t.doc #- '{devices,1,model}', 'inventory field devices[1].model is missing or not a string', 'model missing'),
    (jsonb_set(t.doc, '{devices,0,memory_mib}', '"143771"'), 'inventory field devices[0].memory_mib is missing or not a number',
     'memory_mib a string'),
    (jsonb_set(t.doc, '{devices,1,nvlink_peers}', '"GPU-1"'), 'inventory field devices[1].nvlink_peers is missing or not an array',
     'nvlink_peers not a list'),
    (t.doc #- '{devices,0,mig,supported}', 'inventory field devices[0].mig.supported is missing or not a boolean', 'mig.supported missing'),
    (t.doc #- '{devices,0,mig,profiles,4,placements}',
     'inventory field devices[0].mig.profiles needs name, slices and placements in every profile', 'a MIG profile without placements'),
    (jsonb_set(t.doc, '{devices,1,uuid}', t.doc #> '{devices,0,uuid}'), 'the inventory lists a GPU uuid twice', 'a GPU uuid twice'),
    ('[]'::jsonb, 'an inventory is a JSON object', 'not an object')
  ) AS c(doc, message, description);
SELECT is((SELECT count(*)::integer FROM compute.nodes WHERE name = 'node-x'), 0, 'no refused document registered the node');

-- Unknown fields, at the top and in a device, are accepted and kept.
SELECT lives_ok($$SELECT pg_temp.register(jsonb_set(doc || '{"x_rack": "r12"}', '{devices,1,x_firmware}', '"96.00.5E"')) FROM t$$,
                'a document with fields we do not know is accepted');
SELECT is((SELECT inventory ->> 'x_rack' || ' ' || (inventory #>> '{devices,1,x_firmware}') FROM compute.nodes WHERE name = 'node-x'),
          'r12 96.00.5E', 'and stored with them');

SELECT * FROM finish();
ROLLBACK;
