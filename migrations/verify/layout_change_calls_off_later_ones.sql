-- Verify better_compute:layout_change_calls_off_later_ones on pg

BEGIN;

-- Sequences are not rolled back: the ones the check advances are put back as they were.
CREATE TEMP TABLE verify_sequences ON COMMIT DROP AS
    SELECT pg_catalog.format('%I.%I', s.schemaname, s.sequencename) AS name, s.last_value, s.start_value
      FROM pg_catalog.pg_sequences AS s WHERE s.schemaname = 'compute';

-- A GPU laid out MIG at +10 h and whole again at +20 h, then whole from +5 h: one whole-GPU atom.
DO $$
DECLARE
    v_pool   uuid := compute.pool_create(compute.site_create('verify-layout-site'), 'verify-layout-pool', 'NVIDIA H200');
    v_device uuid;
    v_now    timestamptz := compute.compute_now();
BEGIN
    PERFORM compute.node_register(v_pool, 'verify-layout-node', jsonb_build_object(
        'version', 1, 'hostname', 'verify-layout-node', 'boot_id', 'verify',
        'driver', jsonb_build_object('name', 'nvidia', 'version', '580.159.04', 'cuda', '13.0'),
        'shared_device_nodes', jsonb_build_array('/dev/nvidiactl'),
        'devices', jsonb_build_array(jsonb_build_object(
            'uuid', 'GPU-verify-layout', 'index', 0, 'pci_bus_id', '00000000:00:06.0', 'model', 'NVIDIA H200',
            'memory_mib', 143771, 'numa_node', NULL, 'device_nodes', jsonb_build_array('/dev/nvidia0'), 'nvlink_peers', '[]'::jsonb,
            'mig', jsonb_build_object('supported', true, 'mode', 'disabled', 'instances', '[]'::jsonb,
                'profiles', jsonb_build_array(jsonb_build_object('name', '3g.71gb', 'id', 9, 'slices', 4, 'memory_mib', 71424,
                                                                 'sm', 60, 'placements', jsonb_build_array(0, 4)))),
            'health', jsonb_build_object('ok', true, 'ecc_uncorrected', 0, 'xid', '[]'::jsonb)))));
    SELECT d.device_id INTO v_device FROM compute.devices AS d WHERE d.uuid = 'GPU-verify-layout';
    PERFORM compute.device_set_layout(v_device, 'mig:3g.71gb@0,3g.71gb@4', v_now + interval '10 hours');
    PERFORM compute.device_set_layout(v_device, 'whole', v_now + interval '20 hours');
    PERFORM compute.device_set_layout(v_device, 'whole', v_now + interval '5 hours');
END $$;
SELECT 1 / (pg_catalog.array_agg(a.shape || ' ' || upper_inf(a.valid)::text) = ARRAY['gpu true'])::integer
  FROM compute.atoms AS a JOIN compute.devices AS d ON d.device_id = a.device_id WHERE d.uuid = 'GPU-verify-layout';

SELECT pg_catalog.setval(v.name, coalesce(v.last_value, v.start_value), v.last_value IS NOT NULL) FROM verify_sequences AS v;

ROLLBACK;
