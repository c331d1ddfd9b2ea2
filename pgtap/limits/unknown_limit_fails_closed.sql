-- An unknown limit name is NOT_FOUND, never "no limit".
BEGIN;
SELECT plan(2);

SELECT throws_ok($$SELECT compute.limit('no_such_limit')$$, 'BC404', 'no limit named ''no_such_limit''',
                 'unknown limit is NOT_FOUND');
SELECT throws_ok($$SELECT compute.limit(NULL)$$, 'BC404', NULL, 'NULL name is NOT_FOUND');

SELECT * FROM finish();
ROLLBACK;
