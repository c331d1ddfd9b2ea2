-- Deploy better_compute:tenancy to pg
-- Snapshot of sql/100_tenancy.sql when this change was planned.

BEGIN;

-- Tenancy (DESIGN §5). Better IAM owns the tenant tree; we mirror a tenant's id (and a display
-- name) so that our rows can reference it. Projects live inside a tenant.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.tenants (
    tenant_id  uuid PRIMARY KEY,
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.tenants IS 'Mirror of Better IAM tenants we hold rows for (id and display name only).';

CREATE TABLE compute.projects (
    project_id uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES compute.tenants,
    name       text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    created_at timestamptz NOT NULL,
    UNIQUE (tenant_id, name),
    UNIQUE (project_id, tenant_id)
);
COMMENT ON TABLE compute.projects IS 'A project inside a tenant; quotas and reservations may name one.';

CREATE FUNCTION compute.tenant_ensure(p_tenant_id uuid, p_name text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tenant_id IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'tenant_id is required', 'Pass the Better IAM tenant id.');
    END IF;
    INSERT INTO compute.tenants AS t (tenant_id, name, created_at)
    VALUES (p_tenant_id, coalesce(p_name, p_tenant_id::text), compute.compute_now())
    ON CONFLICT (tenant_id) DO UPDATE SET name = coalesce(p_name, t.name)
        WHERE p_name IS NOT NULL AND t.name IS DISTINCT FROM p_name;
    RETURN p_tenant_id;
END
$$;
COMMENT ON FUNCTION compute.tenant_ensure(uuid, text) IS 'Mirror a tenant (idempotent); renames when a name is given.';

CREATE FUNCTION compute.project_create(p_tenant_id uuid, p_name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_project_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid project name %L', p_name),
            'Use 1-63 characters: lower-case letters, digits, ".", "_" or "-", starting with a letter or digit.');
    END IF;
    INSERT INTO compute.projects (project_id, tenant_id, name, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_tenant_id, p_name, compute.compute_now())
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING project_id INTO v_project_id;
    IF v_project_id IS NULL THEN
        SELECT p.project_id INTO v_project_id FROM compute.projects AS p WHERE p.tenant_id = p_tenant_id AND p.name = p_name;
    END IF;
    RETURN v_project_id;
END
$$;
COMMENT ON FUNCTION compute.project_create(uuid, text) IS 'Create a project in a tenant, or return the existing one of that name.';

COMMIT;
