-- Verify better_compute:wake_gate on pg
-- Content-free wake-ups (bc_work, bc_outbox) sent at commit by deferred triggers (compute.wake_at_commit), one committing transaction at a time (a tried advisory lock), so committing writers no longer queue behind NOTIFY's commit lock
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.wake_at_commit()'::regprocedure;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.outbox'::regclass AND conname = 'outbox_wake';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.work'::regclass AND conname = 'work_wake';

ROLLBACK;
