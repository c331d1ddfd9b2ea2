-- Deploy better_compute:plans_follow_table_growth to pg
-- Snapshot of sql/460_table_statistics.sql (and the analyze_changed_rows limit) when this change was planned.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE STATISTICS compute.atoms_validity ON lower(valid), upper(valid), upper_inf(valid) FROM compute.atoms;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.place_candidates(p_pool_id uuid, p_shape text, p_during tstzrange, p_spread boolean, p_skip uuid[], p_limit bigint)
 RETURNS compute.placement_candidate[]
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_candidates compute.placement_candidate[];
BEGIN
    -- Two statements, one per order, so that each walks its own index (atoms_pack_order,
    -- atoms_spread_order) and stops after p_limit. Their filter is the same: it spells out
    -- compute.atom_is_schedulable and compute.atom_is_free, because calls of those (not inlinable:
    -- they hold subqueries) cost a function call per scanned atom; `valid @> window` is written as
    -- bounds so as not to steer the planner to atoms_disjoint; OFFSET 0 keeps the bookings check a
    -- per-atom probe of bookings_exclusive instead of a join over every booking of the window.
    IF p_spread THEN
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND lower(a.valid) <= lower(p_during) AND (upper_inf(a.valid) OR upper(a.valid) >= upper(p_during))
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state IN ('provisional', 'active')
                                   OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.device_index, a.node_rank, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    ELSE
        SELECT pg_catalog.array_agg(ROW(c.atom_id, c.node_id, c.device_id, d.uuid, d.nvlink_peers, c.node_rank, c.device_index,
                                        lower(c.slices), c.slot)::compute.placement_candidate)
          INTO v_candidates
          FROM (SELECT a.* FROM compute.atoms AS a
                 WHERE a.pool_id = p_pool_id AND a.shape = p_shape AND NOT (a.device_id = ANY (p_skip))
                   AND lower(a.valid) <= lower(p_during) AND (upper_inf(a.valid) OR upper(a.valid) >= upper(p_during))
                   AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
                   AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
                   AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                                    WHERE b.site_id = a.site_id AND b.device_id = a.device_id AND b.slices && a.slices
                                      AND b.shares && a.shares AND b.during && p_during AND b.state IN ('provisional', 'active')
                                   OFFSET 0)
                 ORDER BY a.pool_id, a.shape, a.node_rank, a.device_index, a.slices, a.slot
                 LIMIT p_limit) AS c
          JOIN compute.devices AS d ON d.device_id = c.device_id;
    END IF;
    RETURN coalesce(v_candidates, '{}');
END
$function$;

CREATE OR REPLACE FUNCTION compute.tables_analyze()
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.tables_analyze() IS 'ANALYZE each compute table changed since its last analysis by at least its size then and analyze_changed_rows; returns how many.';

CREATE OR REPLACE FUNCTION worker_api.tables_analyze()
 RETURNS integer
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT compute.tables_analyze() $function$;

COMMENT ON FUNCTION worker_api.tables_analyze() IS 'Periodic: analyse the compute tables that grew, shrank or changed by a factor (invalidates stale cached plans).';

GRANT EXECUTE ON FUNCTION worker_api.tables_analyze() TO bc_worker;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('analyze_changed_rows',            200, 'count',   'Rows a table must have gained, lost or changed since it was last analysed (and at least as many as it then had) before the worker analyses it.');

INSERT INTO compute.work_periodic (kind, every) VALUES ('tables.analyze', interval '30 seconds');

COMMIT;
