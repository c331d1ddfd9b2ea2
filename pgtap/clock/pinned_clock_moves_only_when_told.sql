-- A pinned clock stays put, moves by clock_advance, and follows now() again after clock_unpin.
BEGIN;
SELECT plan(7);

SELECT compute.clock_allow_pinning(true);
SELECT is(compute.clock_pin('2030-06-01 12:00:00+00', true), '2030-06-01 12:00:00+00'::timestamptz, 'clock_pin returns the pin');
SELECT is(compute.compute_now(), '2030-06-01 12:00:00+00'::timestamptz, 'compute_now() returns the pin');
SELECT is(compute.clock_advance('90 minutes', true), '2030-06-01 13:30:00+00'::timestamptz, 'clock_advance moves the pin');
SELECT is(compute.clock_advance('-30 minutes', true), '2030-06-01 13:00:00+00'::timestamptz, 'clock_advance can move it back');
SELECT is(compute.clock_pin('2031-01-01 00:00:00+00', true), '2031-01-01 00:00:00+00'::timestamptz, 'a new pin drops the old offset');
SELECT is(compute.clock_unpin(true), now(), 'clock_unpin follows now() again');
SELECT throws_ok($$SELECT compute.clock_pin(NULL)$$, 'BC400', NULL, 'clock_pin(NULL) is INVALID_ARGUMENT');

SELECT * FROM finish();
ROLLBACK;
