-- Revert better_compute:agent_api_schema from pg

BEGIN;

ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA agent_api REVOKE EXECUTE ON FUNCTIONS FROM bc_gateway;
DROP SCHEMA agent_api;

COMMIT;
