-- Verify better_compute:atom_busy_added_and_document_rows on pg
-- Bookings insert adds the new holds' windows to atom_busy (no recompute from bookings); reservation_document reads readiness and CDI names from the rows it joined (no per-booking reads)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 'compute.atom_cdi_name(compute.atoms,text,jsonb)'::regprocedure;

SELECT 'compute.booking_readiness(compute.bookings,text,text)'::regprocedure;
-- By hand: an insert of bookings adds their windows to atom_busy (no recompute from bookings), and
-- reservation_document passes the rows it read (no per-booking reads by id).
DO $$
BEGIN
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.atom_busy_bookings_changed()'::pg_catalog.regprocedure),
                         'range_agg(c.during') = 0 THEN
        RAISE EXCEPTION 'compute.atom_busy_bookings_changed recomputes summaries on insert';
    END IF;
    IF pg_catalog.strpos((SELECT p.prosrc FROM pg_catalog.pg_proc AS p
                           WHERE p.oid = 'compute.reservation_document(uuid)'::pg_catalog.regprocedure),
                         'booking_readiness(b.booking_id)') > 0 THEN
        RAISE EXCEPTION 'compute.reservation_document reads each booking again for its readiness';
    END IF;
END
$$;

ROLLBACK;
