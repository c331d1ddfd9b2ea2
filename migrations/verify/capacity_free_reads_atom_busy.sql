-- Verify better_compute:capacity_free_reads_atom_busy on pg
-- capacity_free reads compute.atom_busy (the atoms' busy windows, as placement does), never bookings; a window that has ended is INVALID_ARGUMENT, a window's past part is not asked about
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

-- By hand: capacity_free reads the atoms' busy summaries, not bookings.
DO $$
BEGIN
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.capacity_free(uuid,text,timestamptz,timestamptz)'::pg_catalog.regprocedure),
                         'compute.bookings') > 0 THEN
        RAISE EXCEPTION 'compute.capacity_free reads bookings';
    END IF;
END
$$;

ROLLBACK;
