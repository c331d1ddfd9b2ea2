-- Break-glass: an operator runs a catalog method from psql without IAM; the audit names the
-- database role and the reason, which is required.
BEGIN;
SELECT plan(4);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT min(node_id::text) AS node, pgtap_fixtures.tenant('A') AS tenant FROM compute.nodes WHERE pool_id = :'pool' \gset

SET LOCAL ROLE bc_operator;
SELECT throws_ok(format($$SELECT ops.call('nodes.cordon', '{"tenant_id": "%s", "node_id": "%s", "reason": "disk"}', '')$$,
                        :'tenant', :'node'), 'BC400', NULL, 'break-glass without a reason is refused');
SELECT is(ops.call('nodes.cordon', jsonb_build_object('tenant_id', :'tenant', 'node_id', :'node', 'reason', 'disk'),
                   'IAM is down, INC-42') -> 'flags', '["cordoned"]', 'an operator cordons a node without the relay');
RESET ROLE;

SELECT 'db:' || session_user AS who \gset
SELECT is((SELECT principal || ' / ' || reason FROM compute.audit_events WHERE action = 'compute:nodes:cordon'),
          :'who' || ' / break-glass: IAM is down, INC-42', 'the audit names the database role and the reason');
SELECT is((SELECT set_by FROM compute.node_flags WHERE node_id = :'node'), :'who', 'the flag names who set it');

SELECT * FROM finish();
ROLLBACK;
