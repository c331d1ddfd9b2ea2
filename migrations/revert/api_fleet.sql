-- Revert better_compute:api_fleet from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.api_nodes_unquarantine(uuid, text, jsonb);
DROP FUNCTION compute.api_nodes_quarantine(uuid, text, jsonb);
DROP FUNCTION compute.api_nodes_drain(uuid, text, jsonb);
DROP FUNCTION compute.api_nodes_uncordon(uuid, text, jsonb);
DROP FUNCTION compute.api_nodes_cordon(uuid, text, jsonb);
DROP FUNCTION compute.api_node_flag(uuid, text, boolean, jsonb);
DROP FUNCTION compute.api_nodes_get(uuid, jsonb);
DROP FUNCTION compute.api_nodes_list(uuid, jsonb);
DROP FUNCTION compute.api_projects_list(uuid, jsonb);
DROP FUNCTION compute.api_projects_create(uuid, text, jsonb);
DROP FUNCTION compute.project_json(compute.projects);
DROP FUNCTION compute.api_quotas_get(uuid, jsonb);
DROP FUNCTION compute.api_quotas_set(uuid, text, jsonb);
DROP FUNCTION compute.quota_json(uuid, uuid, uuid);
DROP FUNCTION compute.api_offerings_list(uuid, jsonb);
DROP FUNCTION compute.api_offerings_create(uuid, text, jsonb);
DROP FUNCTION compute.api_pools_update(uuid, text, jsonb);
DROP FUNCTION compute.api_pools_get(uuid, jsonb);
DROP FUNCTION compute.api_pools_list(uuid, jsonb);
DROP FUNCTION compute.api_pools_create(uuid, text, jsonb);
DROP FUNCTION compute.api_sites_get(uuid, jsonb);
DROP FUNCTION compute.api_sites_list(uuid, jsonb);
DROP FUNCTION compute.api_sites_create(uuid, text, jsonb);
DROP FUNCTION compute.node_json(uuid);
DROP FUNCTION compute.tenant_pools(uuid);
DROP FUNCTION compute.offering_json(compute.offerings);
DROP FUNCTION compute.pool_json(compute.pools);
DROP FUNCTION compute.site_json(compute.sites);

COMMIT;
