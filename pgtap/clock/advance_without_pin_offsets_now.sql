-- Advancing a clock that is not pinned puts an offset on top of now().
BEGIN;
SELECT plan(2);

SELECT compute.clock_allow_pinning(true);
SELECT compute.clock_unpin(true);
SELECT is(compute.clock_advance('3 hours', true), now() + interval '3 hours', 'advance adds to now()');
SELECT is(compute.clock_advance('1 hour', true), now() + interval '4 hours', 'advances add up');

SELECT * FROM finish();
ROLLBACK;
