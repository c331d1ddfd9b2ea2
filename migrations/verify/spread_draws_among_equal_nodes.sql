-- Verify better_compute:spread_draws_among_equal_nodes on pg
-- place_choose: a spread pool takes equally used nodes in an order drawn per placement (pack keeps pool order); one seed per call
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1;

ROLLBACK;
