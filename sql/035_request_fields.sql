-- The general input parsers: one field of a JSON request (an API method's input, a reservation
-- request), checked for its type, and a time field. Every function that reads a JSON request takes
-- its fields through these, so a wrong type is refused in the same words everywhere.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.request_field(p_request jsonb, p_field text, p_type text, p_required boolean)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_value jsonb := p_request -> p_field;
    v_kind  text := (CASE WHEN p_type IN ('integer', 'object', 'array') THEN 'an ' ELSE 'a ' END) || p_type;
BEGIN
    IF v_value IS NULL OR v_value = 'null'::jsonb THEN
        IF p_required THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', p_field),
                pg_catalog.format('Pass %s (%s).', p_field, v_kind));
        END IF;
        RETURN NULL;
    END IF;
    IF pg_catalog.jsonb_typeof(v_value) <> (CASE p_type WHEN 'uuid' THEN 'string' WHEN 'timestamp' THEN 'string'
                                                        WHEN 'integer' THEN 'number' ELSE p_type END)
       OR (p_type = 'uuid' AND v_value #>> '{}' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
       OR (p_type = 'integer' AND (v_value #>> '{}') !~ '^-?[0-9]{1,9}(\.0+)?$')  -- JSON Schema's integer: 371.0 is one
       OR (p_type = 'timestamp' AND (v_value #>> '{}') !~ '^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d{1,6})?)?(Z|[+-]\d\d(:?\d\d)?)$') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a valid %s: %s', p_field, p_type, v_value),
            CASE p_type WHEN 'timestamp' THEN pg_catalog.format('Pass %s as an ISO 8601 time with its offset, e.g. 2026-12-01T12:00:00Z.', p_field)
                        ELSE pg_catalog.format('Pass %s as %s.', p_field, v_kind) END);
    END IF;
    IF p_type = 'integer' THEN
        RETURN pg_catalog.to_jsonb((v_value #>> '{}')::numeric::integer);
    END IF;
    RETURN v_value;
END
$$;
COMMENT ON FUNCTION compute.request_field(jsonb, text, text, boolean) IS 'One field of a JSON request, checked for type; INVALID_ARGUMENT naming it otherwise.';

CREATE FUNCTION compute.request_timestamp(p_request jsonb, p_field text, p_required boolean)
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
