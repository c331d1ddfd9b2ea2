-- Verify better_compute:node_flags on pg

BEGIN;

SELECT 'compute.node_flag_set(uuid, text, text, text)'::regprocedure, 'compute.node_flag_clear(uuid, text)'::regprocedure,
       'compute.node_drains_complete()'::regprocedure;

ROLLBACK;
