-- Verify better_compute:extensions on pg

BEGIN;

SELECT 1 / count(*)::int FROM pg_catalog.pg_extension WHERE extname = 'btree_gist';

ROLLBACK;
