-- Verify better_compute:capacity_timeline_own_history on pg
-- capacity.timeline: live bookings through bookings_pool, the caller's own released ones through bookings_tenant_pool; others' released history not shown
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1;

ROLLBACK;
