-- Verify better_compute:v0_2_0_repairs on pg

BEGIN;

SELECT 'compute.require_name(text, text)'::regprocedure, 'compute.pool_get(uuid)'::regprocedure,
       'compute.node_get(uuid)'::regprocedure,
       'compute.capacity_earliest_start(uuid, text, integer, interval, timestamptz, timestamptz)'::regprocedure,
       'compute.devices_absent'::regclass;
SELECT 1 / (compute.require_name('site', 'a-site') = 'a-site')::int;
SELECT 1 / (NOT EXISTS (SELECT 1 FROM compute.limits WHERE name = 'capacity_search_checks'))::int;
-- The quota counts' index is the btree on the end of the window.
SELECT 1 / (pg_catalog.pg_get_indexdef('compute.bookings_tenant_pool'::regclass) ~ 'btree .*upper\(during\)')::int;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.compute_now()'::regprocedure) ~ 'LANGUAGE plpgsql')::int;

ROLLBACK;
