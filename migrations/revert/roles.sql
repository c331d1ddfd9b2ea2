-- Revert better_compute:roles from pg
-- Roles belong to the cluster: a role still used by another database is kept (with a NOTICE).

BEGIN;

DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['bc_operator', 'bc_worker', 'bc_gateway', 'bc_api', 'bc_owner'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE pg_catalog.format('DROP ROLE %I', v_role);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'role % kept: another database of this cluster still uses it', v_role;
        END;
    END LOOP;
END
$roles$;

COMMIT;
