-- An operator's typo at psql: each ops.* function that finds a thing by what the operator typed says,
-- when there is none, NOT_FOUND with that very value in the message.
BEGIN;
SELECT plan(10);
SET LOCAL ROLE bc_operator;
SELECT throws_ok($$SELECT ops.node_cordon('node-typo', 'x')$$, 'BC404', 'no node ''node-typo''', 'node_cordon');
SELECT throws_ok($$SELECT ops.node_clear('node-typo', 'cordoned')$$, 'BC404', 'no node ''node-typo''', 'node_clear');
SELECT throws_ok($$SELECT ops.node_fence('node-typo', 'power cut')$$, 'BC404', 'no node ''node-typo''', 'node_fence');
SELECT throws_ok($$SELECT ops.node_cordon('site-typo/node-typo', 'x')$$, 'BC404', 'no node ''site-typo/node-typo''',
    'a site/name that matches nothing');
SELECT throws_ok($$SELECT ops.device_set_layout('GPU-typo', 'whole')$$, 'BC404', 'no GPU ''GPU-typo''', 'device_set_layout');
SELECT throws_like($$SELECT ops.work_retry(987654321)$$, '%987654321%', 'work_retry');
SELECT throws_like($$SELECT ops.webhook_replay('00000000-0000-4000-8000-00000000abcd')$$, '%00000000-0000-4000-8000-00000000abcd%',
    'webhook_replay');
SELECT throws_like($$SELECT ops.audit_proof(987654321)$$, '%987654321%', 'audit_proof');
SELECT throws_like($$SELECT ops.booking_readiness(987654321)$$, '%987654321%', 'booking_readiness');
SELECT throws_like($$SELECT ops.node_ca_activate('abcdef')$$, '%abcdef%', 'node_ca_activate');
RESET ROLE;
SELECT * FROM finish();
ROLLBACK;
