-- Break-glass (issue: operators over psql): an operator (bc_operator) runs any catalog method
-- without the relay and without IAM, e.g.
--   SELECT ops.call('nodes.cordon', '{"tenant_id": "…", "node_id": "…", "reason": "disk"}', 'IAM is down, INC-42');
-- It goes through the same admission as the relay (same validation, same functions), with the
-- database role as the principal and the operator's reason as the decision's reason; mutations are
-- audited by api.admit, reads here. The reason is required.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION ops.call(p_method text, p_input jsonb, p_reason text)
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
        v_answer := api.read(p_method, v_tenant_id, v_input, v_decision);
    ELSE
        v_answer := api.admit((v_prepared ->> 'admission_id')::uuid, v_decision);
    END IF;
    IF v_answer ? 'error' THEN
        PERFORM compute.raise_error(v_answer #>> '{error,code}', v_answer #>> '{error,message}', v_answer #>> '{error,hint}');
    END IF;
    RETURN v_answer -> 'data';
END
$$;
COMMENT ON FUNCTION ops.call(text, jsonb, text) IS 'Break-glass: run any catalog method as the database role (input names tenant_id), audited with the reason.';
