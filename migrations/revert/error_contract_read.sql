-- Revert better_compute:error_contract_read from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION api.error_contract();
DROP FUNCTION node_api.error_contract();
DROP FUNCTION worker_api.error_contract();
DROP FUNCTION ops.error_contract();

COMMIT;
