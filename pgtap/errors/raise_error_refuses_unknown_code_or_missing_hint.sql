-- raise_error fails closed: an unknown code or a missing hint is an internal error, not a contract code.
BEGIN;
SELECT plan(2);

SELECT throws_ok($$SELECT compute.raise_error('NO_SUCH_CODE', 'm', 'h')$$, 'XX000', NULL, 'unknown code is XX000');
SELECT throws_ok($$SELECT compute.raise_error('NOT_FOUND', 'm', NULL)$$, 'XX000', NULL, 'missing hint is XX000');

SELECT * FROM finish();
ROLLBACK;
