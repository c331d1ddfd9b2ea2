-- Revert better_compute:error_contract_read from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION api.error_contract();

DROP FUNCTION node_api.error_contract();

DROP FUNCTION ops.error_contract();

DROP FUNCTION worker_api.error_contract();

COMMIT;
