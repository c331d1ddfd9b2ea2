-- A GPU passed through to a VM is the VM's: the node spec's "gpus" (the MIG layouts bcd converges)
-- leaves it out, and no node grant (readiness, withdrawal) is made for its booking; the host's other
-- GPU stays in "gpus", and a devices booking of it is granted as ever.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 3) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 2)) #>> '{data,instance_id}' AS instance \gset
SELECT pgtap_fixtures.book(:'pool', 'gpu', 1, now(), now() + interval '1 hour', jsonb_build_object('tenant_id', pgtap_fixtures.tenant('A')));

SELECT is((SELECT count(*) FROM compute.node_specs AS s, jsonb_array_elements(s.spec -> 'gpus') AS g
            WHERE s.node_id = :'node' AND g ->> 'uuid' IN (SELECT x ->> 'device_uuid' FROM jsonb_array_elements(s.spec #> '{instances,0,gpus}') AS x)),
          0::bigint, 'no GPU of the instance is in the spec''s gpus');
SELECT is((SELECT jsonb_array_length(spec -> 'gpus') FROM compute.node_specs WHERE node_id = :'node'), 1, 'the host''s other GPU is');
SELECT is((SELECT array_agg(r.instance_kind) FROM compute.node_grants AS g JOIN compute.bookings AS b USING (booking_id)
             JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id WHERE g.node_id = :'node'),
          ARRAY['devices'], 'only the devices booking is granted');

SELECT * FROM finish();
ROLLBACK;
