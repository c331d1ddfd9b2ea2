-- Verify better_compute:placement_recheck_btree on pg

BEGIN;

SELECT 1 / (pg_catalog.to_regclass('compute.bookings_atom_live') IS NOT NULL)::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.atom_is_free(compute.atoms, tstzrange)'::regprocedure) LIKE '%compute.atom_held(%')::integer;
SELECT 1 / (pg_catalog.pg_get_functiondef('compute.reservation_extend(uuid, timestamptz)'::regprocedure) LIKE '%compute.atom_held(%')::integer;

ROLLBACK;
