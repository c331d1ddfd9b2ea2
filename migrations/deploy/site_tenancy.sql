-- Deploy better_compute:site_tenancy to pg
-- Sites belong to a tenant (their pools, nodes and offerings with them); NULL: an operator's site.
-- Site names become unique per tenant (so that one tenant never learns another's names).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE compute.sites ADD COLUMN tenant_id uuid REFERENCES compute.tenants;
ALTER TABLE compute.sites DROP CONSTRAINT sites_name_key;
ALTER TABLE compute.sites ADD CONSTRAINT sites_tenant_id_name_key UNIQUE NULLS NOT DISTINCT (tenant_id, name);
COMMENT ON COLUMN compute.sites.tenant_id IS 'The tenant that owns the site, its pools and nodes; NULL: an operator''s site, reachable through ops only.';

DROP FUNCTION compute.site_create(text);
CREATE FUNCTION compute.site_create(p_name text, p_tenant_id uuid DEFAULT NULL, p_site_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_site_id uuid;
BEGIN
    PERFORM compute.require_name('site', p_name);
    IF p_tenant_id IS NOT NULL THEN
        PERFORM compute.tenant_ensure(p_tenant_id);
    END IF;
    INSERT INTO compute.sites (site_id, name, created_at, tenant_id)
    VALUES (coalesce(p_site_id, pg_catalog.gen_random_uuid()), p_name, compute.compute_now(), p_tenant_id)
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING site_id INTO v_site_id;
    RETURN coalesce(v_site_id, (SELECT s.site_id FROM compute.sites AS s
                                 WHERE s.name = p_name AND s.tenant_id IS NOT DISTINCT FROM p_tenant_id));
END
$$;
COMMENT ON FUNCTION compute.site_create(text, uuid, uuid) IS 'Create a site (of a tenant, or an operator''s without one), or return the existing one of that name.';

COMMIT;
