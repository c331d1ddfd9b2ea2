-- Verify better_compute:wake_gate on pg
-- Content-free wake-ups (bc_work, bc_outbox) through compute.wake: one transaction at a time notifies (a tried advisory lock), so committing writers no longer queue behind NOTIFY's commit lock
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.wake(text)'::regprocedure;

ROLLBACK;
