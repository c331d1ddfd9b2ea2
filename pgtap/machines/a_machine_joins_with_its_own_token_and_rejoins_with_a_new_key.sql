-- Provisioning ends in a normal node: the token the agent put in the image joins only with the
-- machine's system uuid; then active, bookable. Release: cleaning revokes the node's key and
-- cordons it; clean, it is deployed again and rejoins with a new token and a new key.
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT system_uuid AS sysuuid FROM compute.machines WHERE machine_id = :'machine' \gset

SELECT ops.machine_manage('bm-1');
SELECT is(pgtap_fixtures.machine_run(:'machine'), 'manageable', 'verified: manageable');
SELECT ops.machine_provide('bm-1');
SELECT is(pgtap_fixtures.machine_run(:'machine', 'bcjt_first'), 'deploy_wait', 'deployed: waits for its node');
SELECT throws_ok($$SELECT node_api.join('bcjt_first', pgtap_fixtures.inventory('bm-1', 2), decode(repeat('ab', 40), 'hex'))$$,
                 'BC403', 'the join token is not valid', 'the machine''s token without its system uuid is refused');
SELECT node_api.join('bcjt_first', pgtap_fixtures.inventory('bm-1', 2) || jsonb_build_object('system_uuid', :'sysuuid'),
                     decode(repeat('ab', 40), 'hex')) ->> 'node_id' AS node \gset
SELECT is((SELECT state || ' ' || (node_id = :'node'::uuid) FROM compute.machines WHERE machine_id = :'machine'), 'active true',
          'joined with its system uuid: active, with its node');
SELECT is((SELECT count(*) FROM compute.atoms WHERE node_id = :'node'), 2::bigint, 'its GPUs are bookable');

SELECT ops.machine_release('bm-1');
SELECT is((SELECT count(*) FROM compute.node_identities WHERE node_id = :'node'), 0::bigint, 'cleaning revokes the old key at once');
SELECT is(pgtap_fixtures.machine_run(:'machine', 'bcjt_second'), 'deploy_wait', 'cleaned, available, deployed again');
SELECT node_api.join('bcjt_second', pgtap_fixtures.inventory('bm-1', 2) || jsonb_build_object('system_uuid', :'sysuuid'),
                     decode(repeat('cd', 40), 'hex'));
SELECT is((SELECT public_key FROM compute.node_identities WHERE node_id = :'node'), decode(repeat('cd', 40), 'hex'),
          'the rejoin registers the new key for the same node');
SELECT is((SELECT state || ' ' || NOT EXISTS (SELECT 1 FROM compute.node_flags WHERE node_id = :'node')
             FROM compute.machines WHERE machine_id = :'machine'), 'active true', 'active again, no flag left');

SELECT * FROM finish();
ROLLBACK;
