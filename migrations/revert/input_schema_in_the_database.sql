-- Revert better_compute:input_schema_in_the_database from pg

BEGIN;

SET LOCAL ROLE bc_owner;

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
    IF p_reason IS NULL OR length(btrim(p_reason)) NOT BETWEEN 1 AND 1000 THEN
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

CREATE OR REPLACE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
-- The database's own check of an input against the catalog (the relay checks the full JSON Schema
-- first; ops.call comes here directly): an object, no unknown fields, every required one present.
-- Field types are checked where each field is read (compute.request_field).
DECLARE
    v_field text;
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
END
$$;
COMMENT ON FUNCTION compute.input_check(jsonb, jsonb) IS 'INVALID_ARGUMENT unless the input is an object with no unknown field and every required one.';

DROP FUNCTION compute.input_value_problem(jsonb, jsonb);

COMMIT;
