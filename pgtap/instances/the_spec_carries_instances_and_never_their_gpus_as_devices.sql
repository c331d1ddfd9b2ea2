-- The node spec lists the host's instances with their GPUs' PCI bus ids from the inventory, vCPUs and
-- memory per GPU from the offering; GPUs booked for a VPS never appear under "devices" (the CDI file);
-- the generation bumps when an instance's desired state changes (stop), and not otherwise.
BEGIN;
SELECT plan(7);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 3) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 2)) #>> '{data,instance_id}' AS instance \gset
SELECT pgtap_fixtures.book(:'pool', 'gpu', 1, now(), now() + interval '1 hour', jsonb_build_object('tenant_id', pgtap_fixtures.tenant('A')));

SELECT is((SELECT jsonb_agg(g ->> 'pci_bus_id' ORDER BY g ->> 'pci_bus_id') FROM compute.node_specs AS s,
                  jsonb_array_elements(s.spec #> '{instances,0,gpus}') AS g WHERE s.node_id = :'node'),
          (SELECT jsonb_agg(d.pci_bus_id ORDER BY d.pci_bus_id) FROM compute.bookings AS b JOIN compute.devices AS d USING (device_id)
            JOIN compute.instances AS i USING (reservation_id) WHERE i.instance_id = :'instance'),
          'the instance''s GPUs are its booked GPUs, at their PCI bus ids');
SELECT is((SELECT (spec #> '{instances,0}') - 'gpus' - 'ssh_keys' - 'image' FROM compute.node_specs WHERE node_id = :'node'),
          jsonb_build_object('instance_id', :'instance', 'domain', 'bc-' || :'instance', 'generation', 1, 'power', 'running',
                             'reboots', 0, 'vcpus', 16, 'memory_mib', 131072, 'disk_gib', 50),
          'vCPUs and memory follow the GPUs (8 and 64 GiB per GPU)');
SELECT is((SELECT jsonb_array_length(spec -> 'devices') FROM compute.node_specs WHERE node_id = :'node'), 1,
          'only the devices reservation''s GPU is a device');
SELECT is((SELECT count(*) FROM compute.node_specs AS s, jsonb_array_elements(s.spec -> 'devices') AS d
            WHERE s.node_id = :'node' AND d ->> 'device_uuid' IN (SELECT g ->> 'device_uuid' FROM jsonb_array_elements(s.spec #> '{instances,0,gpus}') AS g)),
          0::bigint, 'no GPU of the instance is in devices');
SELECT generation AS before FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT is(compute.node_spec_refresh(:'node'), :'before'::bigint, 'nothing changed: the same generation');
SELECT pgtap_fixtures.node_observes(:'node', jsonb_build_array(jsonb_build_object('instance_id', :'instance', 'generation', 1, 'state', 'running')));
SELECT pgtap_fixtures.api('instances.stop', pgtap_fixtures.tenant('A'), jsonb_build_object('instance_id', :'instance'));
SELECT cmp_ok((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), '>', :'before'::bigint, 'a stop bumps the generation');
SELECT is((SELECT spec #>> '{instances,0,power}' FROM compute.node_specs WHERE node_id = :'node'), 'stopped', 'the spec says stopped');

SELECT * FROM finish();
ROLLBACK;
