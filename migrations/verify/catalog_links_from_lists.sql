-- Verify better_compute:catalog_links_from_lists on pg

BEGIN;

SELECT 1 / (SELECT count(*) FROM api.catalog_links() AS l WHERE l.method = 'nodes.list' AND l.pointer = '/data/0/node_id')::integer;

ROLLBACK;
