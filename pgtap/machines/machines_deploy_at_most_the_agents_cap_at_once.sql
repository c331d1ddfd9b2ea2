-- At most machines_provisioning_per_agent machines of one site agent deploy at once: the next one
-- waits in deploying, at step 0, with no deadline running, until one of them is through.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
UPDATE compute.limits SET value = 1 WHERE name = 'machines_provisioning_per_agent';
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS first \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-2') AS second \gset
SELECT ops.machine_manage(m) FROM unnest(ARRAY['bm-1', 'bm-2']) AS m;
SELECT pgtap_fixtures.machine_run(m) FROM unnest(ARRAY[:'first', :'second']::uuid[]) AS m;
SELECT ops.machine_provide(m) FROM unnest(ARRAY['bm-1', 'bm-2']) AS m;

SELECT is(compute.machine_reconcile(:'first'), 'issued power_off', 'the first machine deploys');
SELECT is(compute.machine_reconcile(:'second'), 'queued for a provisioning slot', 'the second waits for a slot');
SELECT is((SELECT deadline FROM compute.machines WHERE machine_id = :'second'), NULL, 'its deadline does not run while it waits');
SELECT pgtap_fixtures.machine_run(:'first');
SELECT ops.machine_abort('bm-1', 'make room');  -- deploy_wait counts as provisioning too; an abort frees the slot
SELECT is(compute.machine_reconcile(:'second'), 'issued power_off', 'a freed slot lets the next machine deploy');

SELECT * FROM finish();
ROLLBACK;
