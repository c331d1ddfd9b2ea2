-- Roles (docs/architecture.md §3). NOLOGIN group roles; login roles are the deployer's choice, e.g.
--   CREATE ROLE relay LOGIN; GRANT bc_api TO relay;
--
--   bc_owner     owns every object; SECURITY DEFINER functions run as it. Never a login role.
--   bc_api       the HTTP relay: EXECUTE in schema api, nothing else.
--   bc_gateway   node gateways: EXECUTE in schema node_api, nothing else.
--   bc_worker    workers: EXECUTE in schema worker_api, nothing else.
--   bc_operator  people at psql: SELECT on the views and EXECUTE on the functions of schema ops.
--
-- Roles belong to the cluster, not to one database: a role that already exists is kept as it is.
DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['bc_owner', 'bc_api', 'bc_gateway', 'bc_worker', 'bc_operator'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        END IF;
    END LOOP;
END
$roles$;
