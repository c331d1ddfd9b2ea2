-- Constraints are named by what they hold (sql/ names each one; migrations may rely on the names):
-- none has a name PostgreSQL numbers for a CHECK over several columns (reservations_check1).
BEGIN;
SELECT plan(2);

SELECT is(
    ARRAY(SELECT c.conrelid::regclass::text || ' ' || c.conname
            FROM pg_catalog.pg_constraint AS c
            JOIN pg_catalog.pg_class AS t ON t.oid = c.conrelid
            JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
           WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
             AND c.conname ~ ('^' || t.relname || '_check[0-9]*$')
           ORDER BY 1),
    '{}'::text[],
    'no constraint is named <table>_check or <table>_checkN');

SELECT ok(EXISTS (SELECT FROM pg_catalog.pg_constraint
                   WHERE conrelid = 'compute.reservations'::regclass AND conname = 'reservations_provisional_has_expiry'),
          'compute.reservations has reservations_provisional_has_expiry');

SELECT * FROM finish();
ROLLBACK;
