-- An agent's claims never hold more than bmc_sessions_per_agent running operations: with a cap of
-- one, the second machine's op is claimed only once the first one is answered.
BEGIN;
SELECT plan(3);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
UPDATE compute.limits SET value = 1 WHERE name = 'bmc_sessions_per_agent';
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS first \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-2') AS second \gset
SELECT agent_id AS agent FROM compute.machines WHERE machine_id = :'first' \gset
SELECT ops.machine_manage(m) FROM unnest(ARRAY['bm-1', 'bm-2']) AS m;
SELECT compute.machine_reconcile(m), pgtap_fixtures.machine_sign(m) FROM unnest(ARRAY[:'first', :'second']::uuid[]) AS m;

SELECT site_api.ops_claim(:'agent', 10) AS claimed \gset
SELECT is(jsonb_array_length(:'claimed'), 1, 'one op claimed although two are queued and ten were asked for');
SELECT is(jsonb_array_length(site_api.ops_claim(:'agent', 10)), 0, 'nothing more while it runs');
SELECT compute.bmc_op_result(:'agent', (:'claimed'::jsonb -> 0 ->> 'op_id')::bigint, (:'claimed'::jsonb -> 0 ->> 'epoch')::bigint,
                          'failed', '{}', 'HTTP 500');
SELECT is(jsonb_array_length(site_api.ops_claim(:'agent', 10)), 1, 'answered: the next one is claimed');

SELECT * FROM finish();
ROLLBACK;
