-- A node's spec lists the atoms held now with their CDI names; its generation moves when that
-- changes (activation, release, a booking starting as time passes), not for a future booking.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT generation AS g0 FROM compute.node_specs WHERE node_id = :'node' \gset

SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01 02:00+00')) -> 'data' AS now_r \gset
SELECT is((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), :g0::bigint + 1, 'an activation now bumps the generation once');
SELECT is((SELECT spec -> 'devices' -> 0 ->> 'cdi_name' FROM compute.node_specs WHERE node_id = :'node'),
          :'now_r'::jsonb #>> '{bookings,0,cdi_name}', 'the spec exposes the booked GPU by its CDI name');

SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'start', '2030-01-01 01:00+00', 'end', '2030-01-01 03:00+00')) -> 'data' AS later \gset
SELECT is((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), :g0::bigint + 1, 'a future booking does not');
SELECT is((SELECT count(*) FROM compute.work WHERE kind = 'node.spec.sign' AND key = :'node'), 1::bigint, 'the worker is asked to sign it');

SELECT compute.clock_advance(interval '1 hour', true);
SELECT is(compute.node_specs_tick(), 1, 'when it starts, the tick refreshes the node');
SELECT is((SELECT jsonb_array_length(spec -> 'devices') FROM compute.node_specs WHERE node_id = :'node'), 2, 'both GPUs are exposed now');

SELECT pgtap_fixtures.api('reservations.release', pgtap_fixtures.tenant('A'), jsonb_build_object('reservation_id', :'now_r'::jsonb ->> 'reservation_id'));
SELECT is((SELECT spec -> 'devices' -> 0 ->> 'reservation_id' FROM compute.node_specs WHERE node_id = :'node'),
          :'later'::jsonb ->> 'reservation_id', 'a release removes its GPU from the spec');

SELECT * FROM finish();
ROLLBACK;
