-- An operator can read every view of ops. Views read tables with their owner's privileges but call
-- functions with the reader's, so a view that calls a function of compute (the clock, say) would be
-- granted and still unreadable: each view is read here as bc_operator.
BEGIN;
SELECT plan(2);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
-- A node draining with a booking running, so that every branch of every view is read.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 00:00+00', '2030-01-01 01:00+00') IS NOT NULL FROM t;
SELECT compute.node_flag_set(pgtap_fixtures.node(pool, 1), 'draining', 'tester', 'reboot') FROM t;

CREATE FUNCTION pg_temp.unreadable_ops_views() RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v_view   text;
    v_failed text[] := '{}';
BEGIN
    FOR v_view IN SELECT c.relname FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'ops' AND c.relkind = 'v' ORDER BY c.relname LOOP
        BEGIN
            EXECUTE format('SELECT string_agg(v::text, '' '') FROM ops.%I AS v', v_view);  -- every column, every row
        EXCEPTION WHEN insufficient_privilege THEN
            v_failed := v_failed || (v_view || ': ' || SQLERRM);
        END;
    END LOOP;
    RETURN v_failed;
END
$$;

SELECT cmp_ok((SELECT count(*)::integer FROM pg_views WHERE schemaname = 'ops'), '>=', 5,
              'ops has its views (nodes, pool_capacity, atom_holders, limits, error_codes at least)');
SET LOCAL ROLE bc_operator;
SELECT is(pg_temp.unreadable_ops_views(), '{}'::text[], 'bc_operator reads every view of ops');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
