-- Deploy better_compute:catalog_links_from_lists to pg
-- api.catalog_links also links a listing method's first item (nodes.list -> nodes.cordon by node_id),
-- and says where in the answer the id is (/data/<key> for a create, /data/0/<key> for a list): a
-- tool following the document reaches the methods on resources it cannot create (nodes join
-- through the gateway) or did not create itself.

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION api.catalog_links();

CREATE FUNCTION api.catalog_links()
RETURNS TABLE (method text, target text, key text, pointer text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    -- A method that creates a resource (a mutation not on an existing one) answers the new id under
    -- the key the resource type's other methods take it by (site_id, pool_id, ...): at /data/<key>.
    -- A method that lists a type (a read not on one resource) answers items carrying that key: the
    -- first one's at /data/0/<key>. Every other method whose input has the key can follow it. The
    -- OpenAPI document turns these into links, so tools can chain calls (sites.create ->
    -- pools.create -> ..., nodes.list -> nodes.cordon).
    WITH type_keys AS (
        SELECT DISTINCT m.resource_type, m.resource_key AS key FROM api.methods AS m WHERE m.resource_key IS NOT NULL)
    SELECT c.method, t.method, k.key, CASE c.kind WHEN 'mutation' THEN '/data/' ELSE '/data/0/' END || k.key
      FROM api.methods AS c
      JOIN type_keys AS k ON k.resource_type = c.resource_type
      JOIN api.methods AS t ON t.method <> c.method AND t.input_schema -> 'properties' ? k.key
     WHERE c.resource_key IS NULL
     ORDER BY c.method, t.method;
$$;
COMMENT ON FUNCTION api.catalog_links() IS 'Which methods can take the id a creating method answers, or a listing method''s first item carries: the key and where in the answer (OpenAPI links).';

COMMIT;
