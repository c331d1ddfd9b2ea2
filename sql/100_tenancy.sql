-- Tenancy (docs/architecture.md §5). Better IAM owns the tenant tree; we mirror a tenant's id (and a display
-- name) so that our rows can reference it. Projects live inside a tenant.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.tenants (
    tenant_id  uuid CONSTRAINT tenants_pkey PRIMARY KEY,
    name       text NOT NULL CONSTRAINT tenants_name_check CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE compute.tenants IS 'Mirror of Better IAM tenants we hold rows for (id and display name only).';

CREATE TABLE compute.projects (
    project_id uuid CONSTRAINT projects_pkey PRIMARY KEY,
    tenant_id  uuid NOT NULL CONSTRAINT projects_tenant_id_fkey REFERENCES compute.tenants,
    name       text NOT NULL CONSTRAINT projects_name_check CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    created_at timestamptz NOT NULL,
    CONSTRAINT projects_tenant_id_name_key UNIQUE (tenant_id, name),
    CONSTRAINT projects_project_id_tenant_id_key UNIQUE (project_id, tenant_id)
);
COMMENT ON TABLE compute.projects IS 'A project inside a tenant; quotas and reservations may name one.';

CREATE FUNCTION compute.require_name(p_what text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    -- The one rule for names of projects, sites and pools (their tables CHECK the same pattern).
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid %s name %L', p_what, p_name),
            'Use 1-63 characters: lower-case letters, digits, ".", "_" or "-", starting with a letter or digit.');
    END IF;
    RETURN p_name;
END
$$;
COMMENT ON FUNCTION compute.require_name(text, text) IS 'The name, or INVALID_ARGUMENT unless it is 1-63 lower-case letters, digits, ".", "_", "-".';

CREATE FUNCTION compute.tenant_ensure(p_tenant_id uuid, p_name text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tenant_id IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'tenant_id is required', 'Pass the Better IAM tenant id.');
    END IF;
    -- Only a rename takes the tenant's row lock: reservations of one tenant must not queue here.
    IF p_name IS NOT NULL THEN
        UPDATE compute.tenants SET name = p_name WHERE tenant_id = p_tenant_id AND name IS DISTINCT FROM p_name;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM compute.tenants AS t WHERE t.tenant_id = p_tenant_id) THEN
        INSERT INTO compute.tenants (tenant_id, name, created_at)
        VALUES (p_tenant_id, coalesce(p_name, p_tenant_id::text), compute.compute_now())
        ON CONFLICT (tenant_id) DO NOTHING;
    END IF;
    RETURN p_tenant_id;
END
$$;
COMMENT ON FUNCTION compute.tenant_ensure(uuid, text) IS 'Mirror a tenant (idempotent); renames when a name is given.';

CREATE FUNCTION compute.project_create(p_tenant_id uuid, p_name text, p_project_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_project_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    PERFORM compute.require_name('project', p_name);
    INSERT INTO compute.projects (project_id, tenant_id, name, created_at)
    VALUES (coalesce(p_project_id, pg_catalog.gen_random_uuid()), p_tenant_id, p_name, compute.compute_now())
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING project_id INTO v_project_id;
    IF v_project_id IS NULL THEN
        SELECT p.project_id INTO v_project_id FROM compute.projects AS p WHERE p.tenant_id = p_tenant_id AND p.name = p_name;
    END IF;
    RETURN v_project_id;
END
$$;
COMMENT ON FUNCTION compute.project_create(uuid, text, uuid) IS 'Create a project in a tenant, or return the existing one of that name.';

CREATE FUNCTION compute.project_check(p_tenant_id uuid, p_project_id uuid)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = p_project_id AND p.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in this tenant', p_project_id),
            'Create the project in that tenant first (projects.create); projects.list shows its projects.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.project_check(uuid, uuid) IS 'NOT_FOUND unless the project is the tenant''s (NULL: no project, nothing to check).';
