-- P6: a node unheard for hours only shows Connected=False with the age since last heard; its
-- bookings, spec and flags are unchanged.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-02 00:00+00')) #>> '{data,reservation_id}' AS reservation \gset
SELECT generation AS generation FROM compute.node_specs WHERE node_id = :'node' \gset

SELECT is((SELECT connected FROM ops.nodes WHERE node_id = :'node'), true, 'connected while heard');
SELECT compute.clock_advance(interval '5 hours', true);
SELECT results_eq(format('SELECT connected, last_heard_seconds FROM ops.nodes WHERE node_id = %L', :'node'),
                  $$VALUES (false, 18000.0)$$, 'five hours unheard: Connected=False, heard 18000 s ago');
SELECT is((SELECT state FROM compute.reservations WHERE reservation_id = :'reservation'), 'active', 'the reservation still holds');
SELECT is((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), :generation::bigint, 'the spec is unchanged');
SELECT is((SELECT count(*) FROM compute.node_flags WHERE node_id = :'node'), 0::bigint, 'no flag was set');

SELECT * FROM finish();
ROLLBACK;
