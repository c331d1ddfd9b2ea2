-- A tenant's reservation of shape bare_metal (reservations.create, one IAM decision) books every
-- atom of one whole active machine's node; a machine with any atom held is not whole; the quota
-- counts its atoms. An operator cannot release a machine a tenant holds. The reservation's release
-- starts cleaning (the old node key revoked at once); so does its window running out (the sweep).
BEGIN;
SELECT plan(18);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT '00000000-0000-0000-0000-000000000001' AS tenant \gset
SELECT pgtap_fixtures.fleet('pack', 0, 1, false, :'tenant') AS pool \gset
SELECT compute.offering_create(:'pool', 'bare_metal', 4, interval '30 days', 'bare_metal');
SELECT worker_api.node_ca_publish('CA one', sha256('one'));

-- A machine enrolled, verified, deployed and joined with its token: active, a node of 2 GPUs.
CREATE FUNCTION pg_temp.active_machine(p_pool uuid, p_name text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_machine uuid := pgtap_fixtures.machine(p_pool, p_name);
    v_secret  bytea := sha256(convert_to('bcjt_' || p_name, 'UTF8'));
    v_key     bytea := '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || sha512(convert_to(p_name, 'UTF8'));
BEGIN
    PERFORM ops.machine_manage(p_name);
    PERFORM pgtap_fixtures.machine_run(v_machine);
    PERFORM ops.machine_provide(p_name);
    PERFORM pgtap_fixtures.machine_run(v_machine, 'bcjt_' || p_name);
    PERFORM node_api.join_request(sha256(v_secret), compute.hmac_sha256(v_secret, convert_to(E'bc-v1\njoin\n', 'UTF8') || v_key),
        pgtap_fixtures.inventory(p_name, 2) || jsonb_build_object('system_uuid', m.system_uuid), v_key, 'csr', 'gw-1')
       FROM compute.machines AS m WHERE m.machine_id = v_machine;
    RETURN v_machine;
END $$;
SELECT pg_temp.active_machine(:'pool', 'bm-1') AS m1, pg_temp.active_machine(:'pool', 'bm-2') AS m2 \gset
SELECT node_id AS n1 FROM compute.machines WHERE machine_id = :'m1' \gset
SELECT node_id AS n2 FROM compute.machines WHERE machine_id = :'m2' \gset
SELECT is((SELECT string_agg(state, ' ' ORDER BY name) FROM compute.machines WHERE pool_id = :'pool'), 'active active',
          'two machines are active in the fleet');

-- Through the API: prepare (placed, provisional), allow (active).
CREATE FUNCTION pg_temp.reserve(p_input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT api.admit((api.prepare('reservations.create', '00000000-0000-0000-0000-000000000001', p_input) ->> 'admission_id')::uuid,
                     '{"allowed": true, "principal": "user:alice"}')
$$;
SELECT pg_temp.reserve(jsonb_build_object('pool_id', :'pool', 'shape', 'bare_metal', 'count', 1, 'end', '2030-01-01 02:00+00')) AS first \gset
SELECT (:'first'::jsonb #>> '{data,reservation_id}')::uuid AS r1 \gset
SELECT is((SELECT state || ' ' || count || ' ' || instance_kind FROM compute.reservations WHERE reservation_id = :'r1'),
          'active 1 bare_metal', 'reservations.create of shape bare_metal: one machine, active');
SELECT set_eq(format('SELECT atom_id FROM compute.bookings WHERE reservation_id = %L', :'r1'),
              format('SELECT atom_id FROM compute.atoms WHERE node_id = %L', :'n1'),
              'it books every atom of the first machine''s node');

-- The other machine stops being whole once one of its GPUs is booked.
SELECT compute.reservation_activate((compute.reserve(pgtap_fixtures.request(:'pool', 'gpu', 1, NULL, '2030-01-01 01:00+00'))
                                     ->> 'reservation_id')::uuid) ->> 'state' AS gpu_state \gset
SELECT throws_ok(format('SELECT compute.reserve(pgtap_fixtures.request(%L, ''bare_metal'', 1, NULL, ''2030-01-01 02:00+00''))', :'pool'),
                 'BC409', NULL, 'a machine with a GPU held is not whole: CAPACITY_CONFLICT');
SELECT throws_ok(format('SELECT compute.reserve(pgtap_fixtures.request(%L, ''gpu'', 2, NULL, ''2030-01-01 00:30+00''))', :'pool'),
                 'BC409', NULL, 'and no GPU of the held machine is free for anyone else');

-- After the GPU's reservation, the second machine is whole again; the quota counts its 2 atoms.
SELECT compute.quota_set(:'tenant', NULL, :'pool', 3, NULL);
SELECT throws_ok(format('SELECT compute.reserve(pgtap_fixtures.request(%L, ''bare_metal'', 1, ''2030-01-01 01:00+00'', ''2030-01-01 03:00+00''))', :'pool'),
                 'BC429', NULL, 'a second machine would hold 4 atoms: over a quota of 3');
SELECT compute.quota_set(:'tenant', NULL, :'pool', 4, NULL);
SELECT compute.reservation_activate((compute.reserve(pgtap_fixtures.request(:'pool', 'bare_metal', 1, '2030-01-01 01:00+00', '2030-01-01 03:00+00'))
                                     ->> 'reservation_id')::uuid) #>> '{reservation_id}' AS r2 \gset
SELECT set_eq(format('SELECT atom_id FROM compute.bookings WHERE reservation_id = %L', :'r2'),
              format('SELECT atom_id FROM compute.atoms WHERE node_id = %L', :'n2'),
              'from the GPU''s end on, the second machine is whole: booked');

-- An operator cannot clean a machine under its tenant.
SELECT throws_ok('SELECT ops.machine_release(''bm-1'')', 'BC409', NULL, 'an operator''s release of a held machine is refused');

-- The tenant's release: its machine is cleaned (the reconciler, poked by the release).
SELECT compute.clock_pin('2030-01-01 00:10+00', true);
DELETE FROM compute.work WHERE kind = 'machines.reconcile';
SELECT is(compute.reservation_release(:'r1') ->> 'state', 'released', 'the tenant releases');
SELECT ok(EXISTS (SELECT 1 FROM compute.work WHERE kind = 'machines.reconcile' AND key = :'m1' AND state = 'pending'),
          'the release pokes its machine''s reconciler');
SELECT is(compute.machine_reconcile(:'m1'), 'released', 'which releases the machine');
SELECT is((SELECT state FROM compute.machines WHERE machine_id = :'m1'), 'cleaning', 'into cleaning');
SELECT is((SELECT count(*) FROM compute.node_identities WHERE node_id = :'n1'), 0::bigint, 'its old node key is revoked at once');
SELECT is(pgtap_fixtures.machine_run(:'m1', 'bcjt_again'), 'deploy_wait', 'cleaned, available, deployed again (to rejoin with a new key)');

-- The second reservation's window runs out: no row changes; the sweep finds its machine.
SELECT is(compute.machine_reconcile(:'m2'), 'idle', 'a machine whose reservation runs is left alone');
SELECT compute.clock_pin('2030-01-01 03:00+00', true);
DELETE FROM compute.work WHERE kind = 'machines.reconcile';
SELECT compute.machines_sweep();
SELECT ok(EXISTS (SELECT 1 FROM compute.work WHERE kind = 'machines.reconcile' AND key = :'m2'), 'at its end, the sweep pokes the machine');
SELECT is(compute.machine_reconcile(:'m2'), 'released', 'and it is released');
SELECT is((SELECT state FROM compute.machines WHERE machine_id = :'m2'), 'cleaning', 'to be cleaned');

SELECT * FROM finish();
ROLLBACK;
