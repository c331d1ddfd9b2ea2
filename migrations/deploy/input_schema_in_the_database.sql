-- Deploy better_compute:input_schema_in_the_database to pg
-- The database checks an input against the whole of its method's input_schema (types, enums, lengths,
-- patterns, bounds, items, properties), not only unknown and required fields: ops.call skips the relay's
-- JSON Schema check, and a field no function reads (nodes.uncordon's reason) was not checked at all.
-- ops.call's reason counts its length before trimming (100,000 spaces were audited).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.input_value_problem(p_rule jsonb, p_value jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
-- What is wrong with one value under one rule of the catalog's JSON Schema, or NULL when nothing
-- is. It knows the keywords the catalog uses (type, enum, minLength, maxLength, pattern, minimum,
-- maximum, maxItems, items, maxProperties); formats (uuid, date-time) are checked where a field is
-- read (compute.request_field), whose words a wrong type is refused with here too. The catalog's
-- patterns are written to mean the same in JSON Schema (ECMA-262) and in PostgreSQL's regexes.
DECLARE
    v_type  text := p_rule ->> 'type';
    v_kind  text := pg_catalog.jsonb_typeof(p_value);
    v_text  text;
    v_item  jsonb;
    v_index integer := 0;
    v_count integer;
    v_found text;
BEGIN
    -- Type (JSON Schema's integer is any number with a zero fraction: 371.0 is one).
    IF (CASE WHEN v_type IS NULL THEN false
             WHEN v_kind <> (CASE v_type WHEN 'integer' THEN 'number' ELSE v_type END) THEN true
             WHEN v_type = 'integer' THEN (p_value #>> '{}')::numeric <> pg_catalog.trunc((p_value #>> '{}')::numeric)
             ELSE false END) THEN
        RETURN pg_catalog.format('is not a valid %s: %s', v_type, pg_catalog.left(p_value::text, 100));
    END IF;
    IF p_rule ? 'enum' AND NOT p_rule -> 'enum' @> pg_catalog.jsonb_build_array(p_value) THEN
        RETURN pg_catalog.format('is not one of its enum %s', p_rule -> 'enum');
    END IF;
    CASE v_kind
    WHEN 'string' THEN
        v_text := p_value #>> '{}';
        IF pg_catalog.length(v_text) < (p_rule ->> 'minLength')::integer THEN
            RETURN pg_catalog.format('is shorter than its minLength %s', p_rule ->> 'minLength');
        ELSIF pg_catalog.length(v_text) > (p_rule ->> 'maxLength')::integer THEN
            RETURN pg_catalog.format('is longer than its maxLength %s (%s characters)', p_rule ->> 'maxLength', pg_catalog.length(v_text));
        ELSIF v_text !~ (p_rule ->> 'pattern') THEN
            RETURN pg_catalog.format('does not match its pattern %s: %s', p_rule ->> 'pattern', pg_catalog.left(v_text, 100));
        END IF;
    WHEN 'number' THEN
        IF (p_value #>> '{}')::numeric < (p_rule ->> 'minimum')::numeric THEN
            RETURN pg_catalog.format('is below its minimum %s', p_rule ->> 'minimum');
        ELSIF (p_value #>> '{}')::numeric > (p_rule ->> 'maximum')::numeric THEN
            RETURN pg_catalog.format('is above its maximum %s', p_rule ->> 'maximum');
        END IF;
    WHEN 'array' THEN
        IF pg_catalog.jsonb_array_length(p_value) > (p_rule ->> 'maxItems')::integer THEN
            RETURN pg_catalog.format('has %s items, more than its maxItems %s', pg_catalog.jsonb_array_length(p_value), p_rule ->> 'maxItems');
        END IF;
        IF p_rule ? 'items' THEN
            FOR v_item IN SELECT e FROM pg_catalog.jsonb_array_elements(p_value) AS e LOOP
                v_found := compute.input_value_problem(p_rule -> 'items', v_item);
                IF v_found IS NOT NULL THEN
                    RETURN pg_catalog.format('[%s] %s', v_index, v_found);
                END IF;
                v_index := v_index + 1;
            END LOOP;
        END IF;
    WHEN 'object' THEN
        v_count := (SELECT count(*) FROM pg_catalog.jsonb_object_keys(p_value));
        IF v_count > (p_rule ->> 'maxProperties')::integer THEN
            RETURN pg_catalog.format('has %s fields, more than its maxProperties %s', v_count, p_rule ->> 'maxProperties');
        END IF;
    ELSE
        NULL;
    END CASE;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.input_value_problem(jsonb, jsonb) IS 'What is wrong with a value under one rule of a method''s input_schema, or NULL.';

CREATE OR REPLACE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
-- The database's own check of an input against the catalog's input_schema: the relay checks the
-- same document first with a full JSON Schema validator, ops.call comes here directly, and the
-- rule lives in one place (the catalog row). An object, no unknown field, every required one, and
-- each field within its rule (compute.input_value_problem). A null field counts as absent.
DECLARE
    v_field   text;
    v_value   jsonb;
    v_problem text;
BEGIN
    IF p_input IS NULL OR pg_catalog.jsonb_typeof(p_input) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the input must be a JSON object', 'Send {} when a method takes no fields.');
    END IF;
    SELECT k INTO v_field FROM pg_catalog.jsonb_object_keys(p_input) AS k WHERE NOT (p_schema -> 'properties') ? k ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown field %L', v_field),
            pg_catalog.format('The fields are: %s.', (SELECT pg_catalog.string_agg(k, ', ' ORDER BY k)
                                                          FROM pg_catalog.jsonb_object_keys(p_schema -> 'properties') AS k)));
    END IF;
    SELECT r INTO v_field FROM pg_catalog.jsonb_array_elements_text(coalesce(p_schema -> 'required', '[]')) AS r
     WHERE coalesce(p_input -> r, 'null') = 'null' ORDER BY r LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', v_field),
            pg_catalog.format('Pass %s.', v_field));
    END IF;
    FOR v_field, v_value IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(p_input) AS e WHERE e.value <> 'null' ORDER BY e.key LOOP
        v_problem := compute.input_value_problem(p_schema #> ARRAY['properties', v_field], v_value);
        IF v_problem IS NOT NULL THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', v_field || ' ' || v_problem,
                'The method''s input_schema says what each field takes: SELECT input_schema FROM api.catalog() (or the OpenAPI document).');
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION compute.input_check(jsonb, jsonb) IS 'INVALID_ARGUMENT unless the input conforms to a method''s input_schema (null fields count as absent).';

CREATE OR REPLACE FUNCTION ops.call(p_method text, p_input jsonb, p_reason text)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = ''
AS $$
DECLARE
    v_method    api.methods := compute.method_get(p_method);
    v_tenant_id uuid;
    v_input     jsonb;
    v_decision  jsonb;
    v_prepared  jsonb;
    v_answer    jsonb;
BEGIN
    IF p_reason IS NULL OR length(btrim(p_reason)) = 0 OR length(p_reason) > 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'break-glass needs a reason', 'Say why you bypass IAM (1-1000 characters): it is audited.');
    END IF;
    v_tenant_id := compute.input_uuid(p_input, 'tenant_id');
    v_input := p_input - 'tenant_id';
    v_decision := pg_catalog.jsonb_build_object('allowed', true, 'reason', 'break-glass: ' || p_reason, 'matched', '[]'::jsonb,
                                                'principal', 'db:' || session_user::text);
    v_prepared := api.prepare(p_method, v_tenant_id, v_input);
    IF v_method.kind = 'read' THEN
        PERFORM compute.audit_record(v_tenant_id, v_decision ->> 'principal', v_method.action, v_method.resource_type,
            v_prepared #>> '{iam,resource,id}', 'allow', v_decision ->> 'reason', '[]', NULL,
            pg_catalog.jsonb_build_object('method', p_method, 'break_glass', true));
        RETURN api.read(p_method, v_tenant_id, v_input, v_decision);
    END IF;
    v_answer := api.admit((v_prepared ->> 'admission_id')::uuid, v_decision);
    IF v_answer ? 'error' THEN
        PERFORM compute.raise_error(v_answer #>> '{error,code}', v_answer #>> '{error,message}', v_answer #>> '{error,hint}');
    END IF;
    RETURN v_answer -> 'data';
END
$$;
COMMENT ON FUNCTION ops.call(text, jsonb, text) IS 'Break-glass: run any catalog method as the database role (input names tenant_id), audited with the reason.';

COMMIT;
