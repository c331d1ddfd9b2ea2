-- Revert better_compute:request_time_before_10000 from pg

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.request_timestamp(p_request jsonb, p_field text, p_required boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_text text := compute.request_field(p_request, p_field, 'timestamp', p_required) #>> '{}';
BEGIN
    RETURN v_text::timestamptz;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_time_zone_displacement_value THEN
    PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a valid time: %s', p_field, v_text),
        pg_catalog.format('Pass %s as an ISO 8601 time with its offset, e.g. 2026-12-01T12:00:00Z.', p_field));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.request_timestamp(jsonb, text, boolean) IS 'A time field of a JSON request; INVALID_ARGUMENT naming it when it is not a valid time.';

COMMIT;
