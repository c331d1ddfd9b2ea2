-- Revert better_compute:api_input_conformance from pg

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.request_field(p_request jsonb, p_field text, p_type text, p_required boolean)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_value jsonb := p_request -> p_field;
BEGIN
    IF v_value IS NULL OR v_value = 'null'::jsonb THEN
        IF p_required THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', p_field),
                pg_catalog.format('Pass %s (a %s).', p_field, p_type));
        END IF;
        RETURN NULL;
    END IF;
    IF pg_catalog.jsonb_typeof(v_value) <> (CASE p_type WHEN 'uuid' THEN 'string' WHEN 'timestamp' THEN 'string'
                                                        WHEN 'integer' THEN 'number' ELSE p_type END)
       OR (p_type = 'uuid' AND v_value #>> '{}' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
       OR (p_type = 'integer' AND (v_value #>> '{}') !~ '^-?[0-9]{1,9}$')
       OR (p_type = 'timestamp' AND (v_value #>> '{}') !~ '^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d{1,6})?)?(Z|[+-]\d\d(:?\d\d)?)$') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a valid %s: %s', p_field, p_type, v_value),
            CASE p_type WHEN 'timestamp' THEN pg_catalog.format('Pass %s as an ISO 8601 time with its offset, e.g. 2026-12-01T12:00:00Z.', p_field)
                        ELSE pg_catalog.format('Pass %s as a %s.', p_field, p_type) END);
    END IF;
    RETURN v_value;
END
$$;
COMMENT ON FUNCTION compute.request_field(jsonb, text, text, boolean) IS 'One field of a JSON request, checked for type; INVALID_ARGUMENT naming it otherwise.';

CREATE OR REPLACE FUNCTION compute.request_timestamp(p_request jsonb, p_field text, p_required boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_text text := compute.request_field(p_request, p_field, 'timestamp', p_required) #>> '{}';
BEGIN
    RETURN v_text::timestamptz;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
    PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is not a valid time: %s', p_field, v_text),
        pg_catalog.format('Pass %s as an ISO 8601 time with its offset, e.g. 2026-12-01T12:00:00Z.', p_field));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.request_timestamp(jsonb, text, boolean) IS 'A time field of a JSON request; INVALID_ARGUMENT naming it when it is not a valid time.';

UPDATE api.methods SET input_schema = input_schema #- '{properties,after,pattern}' WHERE method = 'events.list';

COMMIT;
