-- The database cannot express one GPU given to two instances: an instance's GPUs are its
-- reservation's bookings, and bookings_exclusive refuses a second live booking of the same GPU at
-- the same time, whoever writes it. A second instance on a full node is a CAPACITY_CONFLICT.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 2)) #>> '{data,instance_id}' AS first \gset

SELECT is(pgtap_fixtures.refusal(format($$SELECT pgtap_fixtures.api('instances.create', %L, %L)$$, pgtap_fixtures.tenant('A'),
                                        pgtap_fixtures.vps_input(:'pool', 1))) ~ '^BC409: ', true,
          'a second instance on the node whose GPUs are booked is a CAPACITY_CONFLICT');

-- Write the second booking by hand, as a buggy allocator would: a second reservation's booking of
-- the first instance's GPU.
SELECT (compute.reserve(pgtap_fixtures.request(:'pool', 'gpu', 1, now() + interval '2 hours', now() + interval '3 hours')
                        || jsonb_build_object('tenant_id', pgtap_fixtures.tenant('A')))) ->> 'reservation_id' AS other \gset
SELECT throws_ok(format($$INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares,
                                                        gpu_fraction, during, state)
                          SELECT %L, b.tenant_id, b.site_id, b.pool_id, b.node_id, b.device_id, b.atom_id, b.slices, b.shares, b.gpu_fraction,
                                 b.during, 'held'
                            FROM compute.bookings AS b JOIN compute.instances AS i ON i.reservation_id = b.reservation_id
                           WHERE i.instance_id = %L LIMIT 1$$, :'other', :'first'),
                 '23P01', NULL, 'a second live booking of an instance''s GPU violates bookings_exclusive');
SELECT is((SELECT count(DISTINCT i.instance_id) FROM compute.instances AS i JOIN compute.bookings AS b ON b.reservation_id = i.reservation_id
            WHERE b.state = 'held' AND b.device_id IN (SELECT device_id FROM compute.bookings AS f JOIN compute.instances AS fi
                                                                           ON fi.reservation_id = f.reservation_id WHERE fi.instance_id = :'first')),
          1::bigint, 'each of its GPUs belongs to one instance');

SELECT * FROM finish();
ROLLBACK;
