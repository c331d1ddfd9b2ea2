-- Revert better_compute:site_tenancy from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.site_create(text, uuid, uuid);
ALTER TABLE compute.sites DROP CONSTRAINT sites_tenant_id_name_key;
ALTER TABLE compute.sites DROP COLUMN tenant_id;
ALTER TABLE compute.sites ADD CONSTRAINT sites_name_key UNIQUE (name);
CREATE FUNCTION compute.site_create(p_name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_site_id uuid;
BEGIN
    PERFORM compute.require_name('site', p_name);
    INSERT INTO compute.sites (site_id, name, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_name, compute.compute_now())
    ON CONFLICT (name) DO NOTHING
    RETURNING site_id INTO v_site_id;
    RETURN coalesce(v_site_id, (SELECT s.site_id FROM compute.sites AS s WHERE s.name = p_name));
END
$$;
COMMENT ON FUNCTION compute.site_create(text) IS 'Create a site, or return the existing one of that name.';

COMMIT;
