-- Revert better_compute:fleet from pg

BEGIN;

DROP FUNCTION compute.pool_create(uuid, text, text, text);
DROP FUNCTION compute.site_create(text);
DROP TABLE compute.devices;
DROP TABLE compute.node_flags;
DROP TABLE compute.nodes;
DROP TABLE compute.pools;
DROP TABLE compute.sites;

COMMIT;
