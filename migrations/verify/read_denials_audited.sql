-- Verify better_compute:read_denials_audited on pg

BEGIN;

-- A denied read answers {error} and is audited. (The audit event's id is drawn from a sequence,
-- which a rollback does not give back: it is put back here, so a verify leaves no trace.)
DO $$
DECLARE
    v_last   bigint;
    v_called boolean;
    v_answer jsonb;
    v_count  bigint;
BEGIN
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM compute.audit_events_event_id_seq AS s;
    v_answer := api.read('sites.list', '00000000-0000-4000-8000-0000000000f1', '{}',
                         '{"allowed": false, "reason": "verify read_denials_audited", "principal": "verify"}');
    SELECT count(*) INTO v_count FROM compute.audit_events AS e
     WHERE e.tenant_id = '00000000-0000-4000-8000-0000000000f1' AND e.decision = 'deny' AND e.action = 'compute:sites:list';
    PERFORM pg_catalog.setval('compute.audit_events_event_id_seq', v_last, v_called);
    IF NOT v_answer ? 'error' OR v_count <> 1 THEN
        RAISE EXCEPTION 'a denied read is not answered {error} and audited';
    END IF;
END
$$;

ROLLBACK;
