-- Revert better_compute:api_catalog_links from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION api.catalog_links();

COMMIT;
