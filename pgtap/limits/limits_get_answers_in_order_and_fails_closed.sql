-- compute.limits_get reads several limits in one statement, in the order named; an unknown name
-- among them is NOT_FOUND like compute.limit, never a NULL that a least() would skip.
BEGIN;
SELECT plan(3);

SELECT is(compute.limits_get(ARRAY['provisional_seconds', 'atoms_per_reservation']),
          ARRAY[compute.limit('provisional_seconds'), compute.limit('atoms_per_reservation')],
          'the values, in the order named');
SELECT throws_ok($$SELECT compute.limits_get(ARRAY['atoms_per_reservation', 'no_such_limit'])$$, 'BC404',
                 'no limit named ''no_such_limit''', 'an unknown name among known ones is NOT_FOUND');
SELECT throws_ok($$SELECT compute.limits_get(ARRAY[NULL::text])$$, 'BC404', NULL, 'a NULL name is NOT_FOUND');

SELECT * FROM finish();
ROLLBACK;
