-- compute_now() is the transaction's now(); the bc.now setting is ignored where pinning is not
-- allowed, so a session cannot fake business time with a GUC.
BEGIN;
SELECT plan(4);

SELECT compute.clock_allow_pinning(false);
SELECT is(compute.compute_now(), now(), 'compute_now() is now()');
SET LOCAL bc.now = '2001-01-01 00:00:00+00';
SET LOCAL bc.now_offset = '5 days';
SELECT is(compute.compute_now(), now(), 'bc.now and bc.now_offset are ignored where pinning is not allowed');
SELECT throws_ok($$SELECT compute.clock_pin('2030-01-01 00:00+00')$$, 'BC403', NULL,
                 'clock_pin is ACCESS_DENIED where pinning is not allowed');
SELECT throws_ok($$SELECT compute.clock_advance('1 hour')$$, 'BC403', NULL,
                 'clock_advance is ACCESS_DENIED where pinning is not allowed');

SELECT * FROM finish();
ROLLBACK;
