-- Verify better_compute:clock_and_limits_read_once on pg
-- compute_now reads clock_control only when the test clock is set; reserve_hold reads its limits once (compute.limits_get)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.limits_get(text[])'::regprocedure;
-- By hand: compute_now answers now() before it reads clock_control (when the test clock is not set).
DO $$
DECLARE
    v_src text := (SELECT p.prosrc FROM pg_catalog.pg_proc AS p WHERE p.oid = 'compute.compute_now()'::pg_catalog.regprocedure);
BEGIN
    IF pg_catalog.strpos(v_src, 'RETURN pg_catalog.now();') > pg_catalog.strpos(v_src, 'pin_allowed') THEN
        RAISE EXCEPTION 'compute.compute_now reads clock_control on every call';
    END IF;
END
$$;

ROLLBACK;
