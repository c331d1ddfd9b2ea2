-- Verify better_compute:api_fleet on pg

BEGIN;

SELECT 'compute.site_json(compute.sites)'::regprocedure;
SELECT 'compute.pool_json(compute.pools)'::regprocedure;
SELECT 'compute.offering_json(compute.offerings)'::regprocedure;
SELECT 'compute.tenant_pools(uuid)'::regprocedure;
SELECT 'compute.node_json(uuid)'::regprocedure;
SELECT 'compute.api_sites_create(uuid, text, jsonb)'::regprocedure;

ROLLBACK;
