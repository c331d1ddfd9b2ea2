-- Schemas and the privileges every later object inherits (docs/architecture.md §3).
--
-- Objects are created by bc_owner (each later file starts with SET LOCAL ROLE bc_owner), so the
-- default privileges below apply to all of them:
--   * no function is executable by PUBLIC;
--   * a function in api / node_api / worker_api / ops is executable by exactly one client role;
--   * a view in ops is readable by bc_operator.
-- Schema compute is private: no client role has USAGE on it.
CREATE SCHEMA compute AUTHORIZATION bc_owner;
CREATE SCHEMA api AUTHORIZATION bc_owner;
CREATE SCHEMA node_api AUTHORIZATION bc_owner;
CREATE SCHEMA worker_api AUTHORIZATION bc_owner;
CREATE SCHEMA ops AUTHORIZATION bc_owner;

COMMENT ON SCHEMA compute IS 'Tables, types and private functions. No client role may use it.';
COMMENT ON SCHEMA api IS 'Stored-procedure API for the HTTP relay (bc_api).';
COMMENT ON SCHEMA node_api IS 'What gateways call for node traffic (bc_gateway). Never calls IAM.';
COMMENT ON SCHEMA worker_api IS 'What workers call (bc_worker).';
COMMENT ON SCHEMA ops IS 'Views and admin functions for operators at psql (bc_operator).';

GRANT USAGE ON SCHEMA api TO bc_api;
GRANT USAGE ON SCHEMA node_api TO bc_gateway;
GRANT USAGE ON SCHEMA worker_api TO bc_worker;
GRANT USAGE ON SCHEMA ops TO bc_operator;

ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA api GRANT EXECUTE ON FUNCTIONS TO bc_api;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA node_api GRANT EXECUTE ON FUNCTIONS TO bc_gateway;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA worker_api GRANT EXECUTE ON FUNCTIONS TO bc_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA ops GRANT EXECUTE ON FUNCTIONS TO bc_operator;
ALTER DEFAULT PRIVILEGES FOR ROLE bc_owner IN SCHEMA ops GRANT SELECT ON TABLES TO bc_operator;
