-- Behaviour, not just catalog: as each client role, its own now() works and compute is refused.
BEGIN;
SELECT plan(6);

SET LOCAL ROLE bc_api;
SELECT lives_ok('SELECT api.now()', 'bc_api reads the clock through api.now()');
SELECT throws_ok('SELECT compute.compute_now()', '42501', NULL, 'bc_api cannot call into compute');
SELECT throws_ok('SELECT node_api.now()', '42501', NULL, 'bc_api cannot use node_api');
RESET ROLE;

SET LOCAL ROLE bc_operator;
SELECT lives_ok('SELECT name FROM ops.limits', 'bc_operator reads ops.limits');
SELECT throws_ok('SELECT name FROM compute.limits', '42501', NULL, 'bc_operator cannot read compute.limits');
SELECT throws_ok('UPDATE ops.limits SET value = 1', '42501', NULL, 'bc_operator cannot change limits through the view');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
