-- Verify better_compute:inventory on pg

BEGIN;

SELECT 'compute.node_register(uuid, text, jsonb)'::regprocedure, 'compute.inventory_validate(jsonb)'::regprocedure,
       'compute.inventory_layout(jsonb)'::regprocedure, 'compute.inventory_require(jsonb, text, text, text)'::regprocedure;

ROLLBACK;
