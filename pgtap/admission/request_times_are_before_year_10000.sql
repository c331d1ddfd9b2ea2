-- A request's time must fall before 10000-01-01 in UTC: answers carry times in UTC with four-digit
-- years, and 9999-12-31T23:59:59-14:00 (year 10000 there) was taken and answered as a time no
-- client could read back.
BEGIN;
SELECT plan(5);

SELECT is(compute.request_timestamp('{"t": "9999-12-31T23:59:59Z"}', 't', true), '9999-12-31 23:59:59+00'::timestamptz,
          'the last second of 9999 in UTC is a time');
SELECT is(compute.request_timestamp('{"t": "9999-12-31T23:59:59+14:00"}', 't', true), '9999-12-31 09:59:59+00'::timestamptz,
          'so is a time of 9999 with an offset east of UTC');
SELECT throws_ok($$SELECT compute.request_timestamp('{"t": "9999-12-31T23:59:59-14:00"}', 't', true)$$,
                 'BC400', 't is in year 10000 or later in UTC: 9999-12-31T23:59:59-14:00', 'west of UTC it is year 10000: refused');
SELECT is(pgtap_fixtures.refusal($$SELECT compute.request_timestamp('{"t": "9999-12-31T10:00:00-14:00"}', 't', true)$$),
          'BC400: Pass t before 10000-01-01T00:00:00Z.', 'the hint says the bound');

SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool \gset
SELECT throws_ok(format($$SELECT compute.reserve(pgtap_fixtures.request(%L, 'gpu', 1, NULL, NULL)
                          || '{"start": "9999-12-31T00:00:00+14:00", "end": "9999-12-31T23:59:59-14:00"}')$$, :'pool'),
                 'BC400', NULL, 'a reservation ending in year 10000 is refused');

SELECT * FROM finish();
ROLLBACK;
