-- Verify better_compute:admission_fewer_statements on pg
-- Fewer statements per admission: api.prepare books through compute.reserve_hold without building a document, the bookings insert returns the GPU fraction, compute.outbox_booking_changed goes; placement draws the order of equal GPUs within the chosen node
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.reserve_hold(jsonb)'::regprocedure;

SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_proc WHERE oid::regprocedure::text = 'compute.outbox_booking_changed()'))::int;

ROLLBACK;
