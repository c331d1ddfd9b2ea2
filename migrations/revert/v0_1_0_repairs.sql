-- Revert better_compute:v0_1_0_repairs from pg
-- The clock functions as @v0.1.0 released them.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.clock_require_pinning(text);

CREATE OR REPLACE FUNCTION compute.clock_advance(p_by interval, p_local boolean DEFAULT false)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_offset interval := coalesce(nullif(pg_catalog.current_setting('bc.now_offset', true), '')::interval, interval '0');
BEGIN
    -- Guard: pinning is a test facility.
    IF NOT (SELECT c.pin_allowed FROM compute.clock_control AS c) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', 'the clock of this database cannot be moved',
            'Moving the clock is for test databases: an owner enables it with SELECT compute.clock_allow_pinning(true).');
    END IF;
    IF p_by IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'clock_advance needs an interval',
            'Pass an interval such as interval ''2 hours''.');
    END IF;
    -- The offset is added to the pin, or to now() when the clock is not pinned.
    PERFORM pg_catalog.set_config('bc.now_offset', (v_offset + p_by)::text, p_local);
    RETURN compute.compute_now();
END
$function$;

CREATE OR REPLACE FUNCTION compute.clock_pin(p_at timestamp with time zone, p_local boolean DEFAULT false)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Guard: pinning is a test facility.
    IF NOT (SELECT c.pin_allowed FROM compute.clock_control AS c) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', 'the clock of this database cannot be pinned',
            'Pinning is for test databases: an owner enables it with SELECT compute.clock_allow_pinning(true).');
    END IF;
    IF p_at IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'clock_pin needs a time',
            'Pass a timestamptz, or call compute.clock_unpin() to follow now() again.');
    END IF;
    PERFORM pg_catalog.set_config('bc.now', p_at::text, p_local);
    PERFORM pg_catalog.set_config('bc.now_offset', '', p_local);
    RETURN compute.compute_now();
END
$function$;

COMMIT;
