-- Statistics that follow the tables' growth (docs/capacity.md, "Plans on a growing fleet").
-- A new fleet starts with empty tables, and its relays, gateway and workers keep pooled connections
-- for hours: PL/pgSQL caches each session's plans, and a plan made while bookings was empty reads
-- fleet tables sequentially long after they have grown. ANALYZE invalidates every cached plan that
-- depends on the table analysed, in every session; autovacuum analyses a table only after
-- 50 rows + 10 % of it changed, and looks once a minute. The worker's `tables.analyze` step
-- analyses, every 30 seconds, each table of compute whose rows changed (inserted, updated, deleted)
-- since its last analysis by at least as many as it then had, and by at least analyze_changed_rows:
-- a table that doubles is analysed, one that merely churns a little is not, and a table never
-- analysed is analysed once it holds that many changes.
SET LOCAL ROLE bc_owner;

INSERT INTO compute.work_periodic (kind, every) VALUES ('tables.analyze', interval '30 seconds');

CREATE FUNCTION compute.tables_analyze()
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: one table at a time, SHARE UPDATE EXCLUSIVE (ANALYZE's own lock; it blocks no reads or
-- writes), skipped when autovacuum or another worker holds it.
DECLARE
    v_table    regclass;
    v_analysed integer := 0;
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass
          FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_stat_all_tables AS s ON s.relid = c.oid
         WHERE c.relnamespace = 'compute'::regnamespace AND c.relkind = 'r'
           AND s.n_mod_since_analyze >= compute.limit('analyze_changed_rows')
           AND s.n_mod_since_analyze >= greatest(c.reltuples, 0)
         ORDER BY c.oid
    LOOP
        EXECUTE pg_catalog.format('ANALYZE (SKIP_LOCKED) %s', v_table);
        v_analysed := v_analysed + 1;
    END LOOP;
    RETURN v_analysed;
END
$$;
COMMENT ON FUNCTION compute.tables_analyze() IS
    'ANALYZE each compute table changed since its last analysis by at least its size then and analyze_changed_rows; returns how many.';

CREATE FUNCTION worker_api.tables_analyze() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.tables_analyze() $$;
COMMENT ON FUNCTION worker_api.tables_analyze() IS 'Periodic: analyse the compute tables that grew, shrank or changed by a factor (invalidates stale cached plans).';

-- The candidate scan filters atoms on their validity's bounds. Without statistics on those
-- expressions the planner takes a third for each inequality, expects a tenth of a pool's atoms to
-- qualify, and prefers reading, probing and sorting them all to walking atoms_pack_order and stopping
-- after p_limit. Statistics on the expressions (gathered by ANALYZE) tell it nearly all do.
CREATE STATISTICS compute.atoms_validity ON lower(valid), upper(valid), upper_inf(valid) FROM compute.atoms;
-- The candidate scan walks compute.atom_busy's order indexes, which carry a copy of each atom's
-- validity: the same statistics there.
CREATE STATISTICS compute.atom_busy_validity ON lower(valid), upper(valid), upper_inf(valid) FROM compute.atom_busy;

-- The candidate scan always runs its generic plan. Its best plan does not depend on the arguments:
-- walk the pool's order index, probe each atom's device in bookings_exclusive, stop after p_limit.
-- A custom plan knows the window, estimates `during && window` from statistics that are mostly past
-- bookings (few overlap a future window), and probes bookings_pool or bookings_node instead, which
-- return every live booking of the window for each atom; it also plans on every call. Measured on a
-- 1,200-GPU fleet with 96,000 bookings, analysed: 2.4-2.6 ms per admission generic, 3.4 ms custom,
-- 10-16 ms custom without the statistics above (docs/capacity.md, "Plans on a growing fleet").
ALTER FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint) SET plan_cache_mode = force_generic_plan;

-- Placement and booking run generic plans too. With custom plans PostgreSQL planned three of their
-- statements on every call (the device lock and the recheck in compute.place, the bookings INSERT
-- in compute.reserve_hold): each takes an array of ids, whose size only a custom plan knows, so the
-- generic plan always looked dearer, and planning cost about 0.3 ms per admission (pg_stat_statements:
-- plans = calls). Their generic plans are the same index probes. The setting holds for what they call.
ALTER FUNCTION compute.place(uuid, text, integer, tstzrange, boolean) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION compute.reserve_hold(jsonb) SET plan_cache_mode = force_generic_plan;
