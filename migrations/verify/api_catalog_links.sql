-- Verify better_compute:api_catalog_links on pg

BEGIN;

SELECT 1 / (SELECT count(*) FROM api.catalog_links() AS l WHERE l.method = 'sites.create' AND l.target = 'pools.create'
                                                            AND l.key = 'site_id')::integer;

ROLLBACK;
