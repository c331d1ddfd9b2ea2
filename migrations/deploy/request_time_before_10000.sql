-- Deploy better_compute:request_time_before_10000 to pg
-- A request's time must fall before 10000-01-01 in UTC: 9999-12-31T23:59:59-14:00 was accepted and
-- answered as year 10000, which no client can read back (psycopg: timestamp too large).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.request_timestamp(p_request jsonb, p_field text, p_required boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_text text := compute.request_field(p_request, p_field, 'timestamp', p_required) #>> '{}';
    v_at   timestamptz;
BEGIN
    BEGIN
        v_at := v_text::timestamptz;
    EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_time_zone_displacement_value THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a valid time: %s', p_field, v_text),
            pg_catalog.format('Pass %s as an ISO 8601 time with its offset, e.g. 2026-12-01T12:00:00Z.', p_field));
    END;
    -- Answers carry times in UTC with four-digit years: 9999-12-31T23:00:00-14:00 is in year 10000
    -- there, which no client (nor this API's own time fields) could read back.
    IF v_at >= '10000-01-01 00:00:00+00' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is in year 10000 or later in UTC: %s', p_field, v_text),
            pg_catalog.format('Pass %s before 10000-01-01T00:00:00Z.', p_field));
    END IF;
    RETURN v_at;
END
$$;
COMMENT ON FUNCTION compute.request_timestamp(jsonb, text, boolean) IS 'A time field of a JSON request; INVALID_ARGUMENT naming it when it is not a valid time or not before year 10000 in UTC.';

COMMIT;
