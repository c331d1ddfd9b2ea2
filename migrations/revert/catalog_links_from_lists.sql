-- Revert better_compute:catalog_links_from_lists from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION api.catalog_links();

CREATE FUNCTION api.catalog_links()
RETURNS TABLE (method text, target text, key text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    -- A method that creates a resource (a mutation not on an existing one) answers the new id under
    -- the key the resource type's other methods take it by (site_id, pool_id, ...); every other
    -- method whose input has that key can follow it. The OpenAPI document turns these into links,
    -- so tools can chain calls (sites.create -> pools.create -> ...).
    WITH type_keys AS (
        SELECT DISTINCT m.resource_type, m.resource_key AS key FROM api.methods AS m WHERE m.resource_key IS NOT NULL)
    SELECT c.method, t.method, k.key
      FROM api.methods AS c
      JOIN type_keys AS k ON k.resource_type = c.resource_type
      JOIN api.methods AS t ON t.method <> c.method AND t.input_schema -> 'properties' ? k.key
     WHERE c.kind = 'mutation' AND c.resource_key IS NULL
     ORDER BY c.method, t.method;
$$;
COMMENT ON FUNCTION api.catalog_links() IS 'Which methods can take the id a creating method answers, and under which key (OpenAPI links).';

COMMIT;
