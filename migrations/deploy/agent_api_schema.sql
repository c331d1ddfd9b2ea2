-- Deploy better_compute:agent_api_schema to pg
-- The schema agent_api (bc_gateway): what gateways call for site agents' sessions (written by hand: schemas are).

BEGIN;

CREATE SCHEMA agent_api AUTHORIZATION bc_owner;
COMMENT ON SCHEMA agent_api IS 'What gateways call for site agents'' sessions (bc_gateway): certificates, sessions, BMC claims and results.';
GRANT USAGE ON SCHEMA agent_api TO bc_gateway;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA agent_api GRANT EXECUTE ON FUNCTIONS TO bc_gateway;

COMMIT;
