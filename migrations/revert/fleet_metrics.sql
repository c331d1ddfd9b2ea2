-- Revert better_compute:fleet_metrics from pg
-- Fleet gauges in one bounded function: GPUs by pool and state, nodes by session, pending admissions, live work by kind, the webhook backlog (worker_api and ops read it)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.fleet_metrics();

DROP FUNCTION ops.fleet_metrics();

DROP FUNCTION worker_api.fleet_metrics();

COMMIT;
