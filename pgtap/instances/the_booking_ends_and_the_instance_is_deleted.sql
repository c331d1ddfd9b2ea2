-- The VM's life follows its booking: at its end (release, or the window's end as time passes) the
-- instance leaves its node's spec and is deleting; deleted once the node acknowledged a spec without
-- it. Until then nothing claims it is gone (a quiet node keeps it deleting, P6). The booking stays
-- in history, so usage counts it as any reservation's.
BEGIN;
SELECT plan(7);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT compute.clock_pin(now(), true);
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 1)) #>> '{data,instance_id}' AS released \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'),
                          pgtap_fixtures.vps_input(:'pool', 1) || jsonb_build_object('end', now() + interval '10 minutes')) #>> '{data,instance_id}' AS ending \gset
SELECT pgtap_fixtures.node_observes(:'node');

SELECT compute.clock_advance(interval '1 minute', true);
SELECT reservation_id AS reservation FROM compute.instances WHERE instance_id = :'released' \gset
SELECT pgtap_fixtures.api('reservations.release', pgtap_fixtures.tenant('A'), jsonb_build_object('reservation_id', :'reservation'));
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'released'), 'deleting', 'released: deleting');
SELECT is((SELECT jsonb_agg(i ->> 'instance_id') FROM compute.node_specs AS s, jsonb_array_elements(s.spec -> 'instances') AS i
            WHERE s.node_id = :'node'), jsonb_build_array(:'ending'), 'it left the spec');
SELECT pgtap_fixtures.node_observes(:'node');
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'released'), 'deleted', 'the node acknowledged: deleted');
SELECT is((SELECT state FROM compute.bookings WHERE reservation_id = :'reservation'), 'released', 'its booking is history, as any reservation''s');

SELECT compute.clock_advance(interval '10 minutes', true);
SELECT compute.node_specs_tick();
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'ending'), 'deleting', 'the window ended: deleting');
SELECT is((SELECT spec ? 'instances' FROM compute.node_specs WHERE node_id = :'node'), false, 'no instance in the spec');
SELECT pgtap_fixtures.node_observes(:'node');
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'ending'), 'deleted', 'acknowledged: deleted');

SELECT * FROM finish();
ROLLBACK;
