-- p_local => true scopes the pin to the transaction (SET LOCAL semantics); savepoint rollback undoes it.
BEGIN;
SELECT plan(2);

SELECT compute.clock_allow_pinning(true);
SELECT compute.clock_unpin(true);
SAVEPOINT before_pin;
SELECT compute.clock_pin('2030-01-01 00:00:00+00', true);
SELECT is(compute.compute_now(), '2030-01-01 00:00:00+00'::timestamptz, 'pinned inside the savepoint');
ROLLBACK TO SAVEPOINT before_pin;
SELECT is(compute.compute_now(), now(), 'rolled back with the savepoint');

SELECT * FROM finish();
ROLLBACK;
