-- Revert better_compute:read_denials_audited from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION api.read(p_method text, p_tenant_id uuid, p_input jsonb, p_decision jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_method api.methods := compute.method_get(p_method);
    v_result jsonb;
BEGIN
    IF v_method.kind <> 'read' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is a mutation', p_method), 'Admit it with api.admit.');
    END IF;
    IF NOT compute.decision_allowed(p_decision) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', compute.denial(v_method, p_decision) #>> '{error,message}',
                                    compute.denial(v_method, p_decision) #>> '{error,hint}');
    END IF;
    PERFORM compute.input_check(v_method.input_schema, p_input);
    EXECUTE pg_catalog.format('SELECT %s($1, $2)', v_method.function::regproc) INTO v_result USING p_tenant_id, p_input;
    RETURN v_result;
END
$function$;

COMMENT ON FUNCTION api.read(text,uuid,jsonb,jsonb) IS 'A read method after its allow (ACCESS_DENIED otherwise), scoped to the tenant.';

CREATE OR REPLACE FUNCTION ops.call(p_method text, p_input jsonb, p_reason text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
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
$function$;

COMMIT;
