-- Verify better_compute:spread_draws_among_equal_nodes on pg
-- place_choose: a spread pool takes equally used nodes in an order drawn per placement (pack keeps pool order); one seed per call
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

-- By hand: place_choose breaks ties among equally used nodes of a spread pool by the call's draw.
DO $$
BEGIN
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.place_choose(compute.placement_candidate[], integer, tstzrange, boolean, boolean)'::pg_catalog.regprocedure),
                         'pg_catalog.hashtextextended(n.node_id::text, v_seed)') = 0 THEN
        RAISE EXCEPTION 'compute.place_choose takes equally used nodes of a spread pool in pool order, not in a drawn one';
    END IF;
END
$$;

ROLLBACK;
