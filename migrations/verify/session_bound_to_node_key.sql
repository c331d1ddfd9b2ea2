-- Verify better_compute:session_bound_to_node_key on pg
-- A session opens only for the node's registered key: node_api.session_open(node, gateway, public_key) with the client certificate's key (a released machine's unexpired SVID opens none); the two-argument form answers UNSUPPORTED
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.session_open(uuid,text,bytea)'::regprocedure;

SELECT 'node_api.session_open(uuid,text,bytea)'::regprocedure;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'compute.session_open(uuid,text)'))::int;

ROLLBACK;
