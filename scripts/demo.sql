-- `make demo`, step 2: a small fleet from the real H200 capture, a reservation, what operators see.
-- Safe to run again: every step is idempotent (names, idempotency keys; the last reservation is released first).
\set ON_ERROR_STOP 1
\set inventory `cat tests/fixtures/nvidia-h200/inventory.json`
\echo '--- a site, a pool of H200s, two nodes (the captured H200, and a twin with another UUID)'
SELECT compute.site_create('demo-site') AS site_id \gset
SELECT compute.pool_create(:'site_id', 'h200', 'NVIDIA H200', 'pack') AS pool_id \gset
SELECT compute.node_register(:'pool_id', 'gpu-node-01', :'inventory'::jsonb) AS node_1 \gset
SELECT compute.node_register(:'pool_id', 'gpu-node-02',
       jsonb_set(jsonb_set(:'inventory'::jsonb, '{hostname}', '"gpu-node-02"'),
                 '{devices,0,uuid}', '"GPU-00000000-0000-4000-8000-000000000002"')) AS node_2 \gset
SELECT compute.offering_create(:'pool_id', shape, 8, interval '7 days') FROM unnest(ARRAY['gpu', 'mig:3g.71gb']) AS shape;
\echo '--- gpu-node-01 split into two 3g.71gb MIG instances (placements 0 and 4, as the H200 reports them)'
SELECT CASE WHEN layout = 'whole' THEN compute.device_set_layout(device_id, 'mig:3g.71gb@0,3g.71gb@4') END AS atoms_changed
  FROM compute.devices WHERE uuid = 'GPU-fa1e3565-6f0b-4506-b6d4-3b9b3e1f32a9';
SELECT pool, shape, total, bookable, held_now FROM ops.pool_capacity ORDER BY shape;
\echo '--- a tenant reserves one MIG instance for two hours, and activates it'
-- (the previous run's reservation, if any, is released first: the demo can run again at any time)
SELECT count(compute.reservation_release(reservation_id)) AS released_from_a_previous_run
  FROM compute.reservations WHERE pool_id = :'pool_id' AND state = 'active';
SELECT compute.reservation_activate((compute.reserve(jsonb_build_object(
           'tenant_id', '11111111-1111-4111-8111-111111111111', 'pool_id', :'pool_id', 'shape', 'mig:3g.71gb',
           'count', 1, 'end', date_trunc('hour', now()) + interval '3 hours',
           'idempotency_key', 'demo-' || to_char(now(), 'YYYY-MM-DD-HH24-MI-SS'))) ->> 'reservation_id')::uuid)
       -> 'bookings' AS bookings;
SELECT node, shape, placement, holder_tenant IS NOT NULL AS held, held_until FROM ops.atom_holders ORDER BY node, placement;
\echo '--- what is free for the next hour, and the earliest window for both MIG instances'
SELECT node_name, free_atoms FROM compute.capacity_free(:'pool_id', 'mig:3g.71gb', now(), now() + interval '1 hour');
SELECT * FROM compute.capacity_earliest(:'pool_id', 'mig:3g.71gb', 2, interval '1 hour');
\echo '--- an operator cordons gpu-node-02'
SELECT ops.node_cordon('gpu-node-02', 'demo: firmware update');
SELECT name, flags, drain FROM ops.nodes ORDER BY name;
SELECT ops.node_clear('gpu-node-02', 'cordoned');
