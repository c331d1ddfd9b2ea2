-- Verify better_compute:fleet_metrics on pg
-- Fleet gauges in one bounded function: GPUs by pool and state, nodes by session, pending admissions, live work by kind, the webhook backlog (worker_api and ops read it)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.fleet_metrics()'::regprocedure;

SELECT 'ops.fleet_metrics()'::regprocedure;

SELECT 'worker_api.fleet_metrics()'::regprocedure;

ROLLBACK;
