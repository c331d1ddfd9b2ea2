-- Verify better_compute:placement on pg

BEGIN;

SELECT 'compute.place(uuid, text, integer, tstzrange, boolean)'::regprocedure,
       'compute.atom_is_free(compute.atoms, tstzrange)'::regprocedure,
       'compute.atom_is_schedulable(compute.atoms, tstzrange)'::regprocedure;

ROLLBACK;
