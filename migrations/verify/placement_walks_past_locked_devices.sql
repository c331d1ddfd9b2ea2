-- Verify better_compute:placement_walks_past_locked_devices on pg

BEGIN;

-- Two whole GPUs on one node: a request for both gets both, each once.
DO $$
DECLARE
    v_pool uuid := compute.pool_create(compute.site_create('verify-place-site'), 'verify-place-pool', 'NVIDIA H200');
BEGIN
    PERFORM compute.node_register(v_pool, 'verify-place-node', jsonb_build_object(
        'version', 1, 'hostname', 'verify-place-node', 'boot_id', 'verify',
        'driver', jsonb_build_object('name', 'nvidia', 'version', '580.159.04', 'cuda', '13.0'),
        'shared_device_nodes', jsonb_build_array('/dev/nvidiactl'),
        'devices', (SELECT jsonb_agg(jsonb_build_object(
            'uuid', 'GPU-verify-place-' || i, 'index', i, 'pci_bus_id', format('00000000:%s:00.0', 10 + i), 'model', 'NVIDIA H200',
            'memory_mib', 143771, 'numa_node', NULL, 'device_nodes', jsonb_build_array('/dev/nvidia' || i), 'nvlink_peers', '[]'::jsonb,
            'mig', jsonb_build_object('supported', false, 'mode', 'disabled', 'profiles', '[]'::jsonb, 'instances', '[]'::jsonb),
            'health', jsonb_build_object('ok', true, 'ecc_uncorrected', 0, 'xid', '[]'::jsonb)))
            FROM generate_series(0, 1) AS i)));
    PERFORM set_config('verify.placed', array_to_string(compute.place(v_pool, 'gpu', 2,
        tstzrange(compute.compute_now(), compute.compute_now() + interval '1 hour')), ','), true);
END $$;
SELECT 1 / (count(DISTINCT a.device_id) = 2)::integer
  FROM compute.atoms AS a WHERE a.atom_id = ANY (string_to_array(current_setting('verify.placed'), ',')::uuid[]);

ROLLBACK;
