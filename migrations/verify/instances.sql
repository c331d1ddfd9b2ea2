-- Verify better_compute:instances on pg

BEGIN;

SELECT 1/count(*) FROM compute.instance_transitions WHERE from_state = 'deleting' AND to_state = 'deleted';
SELECT instance_id, state, generation, observed_generation, removed_generation FROM compute.instances WHERE false;
SELECT vcpus_per_atom, memory_mib_per_atom FROM compute.offerings WHERE false;
SELECT instance_kind FROM compute.reservations WHERE false;
SELECT 1/count(*) FROM api.methods WHERE method = 'instances.create';
SELECT 1/(compute.node_spec_instances(gen_random_uuid()) = '[]')::integer;
SELECT * FROM ops.instances WHERE false;

ROLLBACK;
