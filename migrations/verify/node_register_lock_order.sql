-- Verify better_compute:node_register_lock_order on pg
-- node_register locks the node's devices before its inventory update (node row, devices, node_specs: one lock order; no deadlock with device_set_layout)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

-- node_register locks the node's devices (device_id order) before the inventory update whose
-- trigger locks node_specs, and the node row without blocking inserts that reference it.
DO $$
DECLARE
    v_src text := (SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                    WHERE p.oid = 'compute.node_register(uuid, text, jsonb)'::pg_catalog.regprocedure);
    v_devices integer := pg_catalog.strpos(v_src, 'ORDER BY d.device_id FOR UPDATE');
    v_inventory integer := pg_catalog.strpos(v_src, 'UPDATE compute.nodes SET inventory');
BEGIN
    IF v_devices = 0 OR v_inventory = 0 OR v_devices > v_inventory OR pg_catalog.strpos(v_src, 'FOR NO KEY UPDATE') = 0 THEN
        RAISE EXCEPTION 'compute.node_register does not lock the node''s devices before its inventory update';
    END IF;
END
$$;

ROLLBACK;
