-- JSON Schema's integer is any number with a zero fraction, so a client that writes 371.0 sent an
-- integer the document allows: it is read as 371. A real fraction, or a string, is still refused.
BEGIN;
SELECT plan(6);

SELECT is(compute.request_field('{"limit": 371.0}', 'limit', 'integer', true), '371'::jsonb, '371.0 is the integer 371');
SELECT is(compute.request_field('{"limit": 3.71e2}', 'limit', 'integer', true), '371'::jsonb, 'so is 3.71e2');
SELECT is(compute.request_field('{"limit": 371}', 'limit', 'integer', true), '371'::jsonb, '371 stays 371');
SELECT throws_ok($$SELECT compute.request_field('{"limit": 371.5}', 'limit', 'integer', true)$$,
                 'BC400', 'limit is not a valid integer: 371.5', 'a fraction is INVALID_ARGUMENT');
SELECT throws_ok($$SELECT compute.request_field('{"limit": "371"}', 'limit', 'integer', true)$$,
                 'BC400', 'limit is not a valid integer: "371"', 'a string is INVALID_ARGUMENT');
SELECT is(compute.input_integer('{"limit": 2.0}', 'limit'), 2, 'what the API methods read (input_integer) is 2');

SELECT * FROM finish();
ROLLBACK;
