-- Verify better_compute:clock_and_limits_read_once on pg
-- compute_now reads clock_control only when the test clock is set; reserve_hold reads its limits once (compute.limits_get)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.limits_get(text[])'::regprocedure;

ROLLBACK;
