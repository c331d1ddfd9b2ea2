-- Events through the outbox: one when a machine is enrolled, one per state change, one when
-- BmcReachable changes; an op result that changes neither writes none. No event holds a credential.
BEGIN;
SELECT plan(3);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT ops.machine_manage('bm-1');
SELECT pgtap_fixtures.machine_run(:'machine');
SELECT ops.machine_provide('bm-1');
SELECT pgtap_fixtures.machine_run(:'machine');

SELECT is((SELECT array_agg(event_type || ':' || (payload ->> 'state') ORDER BY aggregate_seq) FROM compute.outbox
            WHERE aggregate_type = 'machine' AND aggregate_id = :'machine'),
          ARRAY['machine.enrolled:enrolled', 'machine.state_changed:verifying', 'machine.bmc_reachable:verifying',
                'machine.state_changed:manageable', 'machine.state_changed:deploying', 'machine.state_changed:deploy_wait'],
          'enrolled, each state change once, BmcReachable once (five deploy operations wrote no event)');
SELECT is((SELECT count(*) FROM compute.outbox WHERE aggregate_type = 'machine'
            AND (payload::text ~* 'box|password|credential')), 0::bigint, 'no event names a credential');
SELECT is((SELECT count(*) FROM compute.outbox AS o JOIN compute.machine_credentials AS k
             ON position(encode(k.box, 'base64') IN o.payload::text) > 0), 0::bigint, 'no event holds the sealed box');

SELECT * FROM finish();
ROLLBACK;
