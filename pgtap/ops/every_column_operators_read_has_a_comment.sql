-- \d+ ops.<view> at psql explains each column: the views operators read every day have a comment on
-- every column.
BEGIN;
SELECT plan(1);
SELECT is_empty($$
    SELECT c.relname || '.' || a.attname
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE n.nspname = 'ops'
       AND c.relname IN ('nodes', 'devices', 'pool_capacity', 'atom_holders', 'readiness', 'withdrawals', 'work', 'work_dead',
                         'webhook_dead_letters', 'usage')
       AND pg_catalog.col_description(c.oid, a.attnum) IS NULL
     ORDER BY 1$$,
    'every column of ops.nodes, devices, pool_capacity, atom_holders, readiness, withdrawals, work, work_dead, webhook_dead_letters and usage has a comment');
SELECT * FROM finish();
ROLLBACK;
