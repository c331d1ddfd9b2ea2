-- A provisional hold (placed before the IAM decision) keeps its GPU from other placements but is
-- exposed nowhere: not in the node's spec (the only source of its CDI file and grants), not in
-- ops.readiness, not in compute.active_bookings, not in usage, not by the tick; activation
-- exposes it (the control that these checks can see a hold at all).
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:59:30+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT generation AS g0 FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT compute.reserve(pgtap_fixtures.request(:'pool', 'gpu', 1, NULL, '2030-01-01 03:00+00')) ->> 'reservation_id' AS r \gset

CREATE FUNCTION pg_temp.exposed(p_node uuid, p_reservation text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM jsonb_array_elements(compute.node_spec_document(p_node) -> 'devices') AS d
     WHERE d ->> 'reservation_id' = p_reservation
$$;

SELECT is((SELECT count(*) FROM compute.bookings WHERE reservation_id = :'r' AND during @> compute.compute_now()), 1::bigint,
          'the provisional reservation holds the GPU now');
SELECT is(pg_temp.exposed(:'node', :'r'), 0::bigint, 'the node''s spec does not expose it');
SELECT is((SELECT generation FROM compute.node_specs WHERE node_id = :'node'), :g0::bigint, 'nor did placing it change the stored spec');
SELECT is((SELECT count(*) FROM ops.readiness WHERE reservation_id = :'r'), 0::bigint, 'ops.readiness does not list it');
SELECT is((SELECT count(*) FROM compute.active_bookings WHERE reservation_id = :'r'), 0::bigint, 'it is not an active booking');

-- The hour it began closes while it is still provisional (it expires at 01:00:30).
SELECT compute.clock_advance(interval '40 seconds', true);
SELECT compute.node_specs_tick();
SELECT is(pg_temp.exposed(:'node', :'r'), 0::bigint, 'the tick does not expose it either');
SELECT compute.usage_compute();
SELECT is((SELECT count(*) FROM compute.usage_windows WHERE reservation_id = :'r'), 0::bigint, 'no usage window bills it');

SELECT compute.reservation_activate(:'r');
SELECT is((SELECT spec FROM compute.node_specs WHERE node_id = :'node') -> 'devices' -> 0 ->> 'reservation_id', :'r',
          'activation exposes it in the stored spec');
SELECT compute.usage_compute();
SELECT is((SELECT count(*) FROM compute.usage_windows WHERE reservation_id = :'r'), 1::bigint, 'and usage then counts it');

SELECT * FROM finish();
ROLLBACK;
