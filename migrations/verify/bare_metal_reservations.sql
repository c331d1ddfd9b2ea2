-- Verify better_compute:bare_metal_reservations on pg
-- Reservations of shape bare_metal book whole active machines; their end cleans the machine
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.api_capacity_shape(jsonb)'::regprocedure;

SELECT 'compute.machine_atoms_free(uuid,tstzrange)'::regprocedure;

SELECT 'compute.machine_reservation_changed()'::regprocedure;

SELECT 'compute.machine_reservation_ended(compute.machines)'::regprocedure;

SELECT 'compute.place_machines(uuid,integer,tstzrange)'::regprocedure;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.offerings'::regclass AND conname = 'offerings_bare_metal_is_whole_machines';

ROLLBACK;
