-- Revert better_compute:wake_gate from pg
-- Content-free wake-ups (bc_work, bc_outbox) sent at commit by deferred triggers (compute.wake_at_commit), one committing transaction at a time (a tried advisory lock), so committing writers no longer queue behind NOTIFY's commit lock
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.outbox_emit(p_tenant_id uuid, p_aggregate_type text, p_aggregate_id text, p_event_type text, p_payload jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_seq     bigint;
    v_payload jsonb := p_payload;
BEGIN
    -- Bounded payload (P12): an oversized one is replaced by a marker that says where to look.
    IF pg_catalog.octet_length(v_payload::text) > compute.limit('outbox_payload_bytes') THEN
        v_payload := pg_catalog.jsonb_build_object('truncated', true, 'aggregate_type', p_aggregate_type, 'aggregate_id', p_aggregate_id);
    END IF;
    INSERT INTO compute.outbox_sequences AS s (aggregate_type, aggregate_id, last_seq)
    VALUES (p_aggregate_type, p_aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING s.last_seq INTO v_seq;
    INSERT INTO compute.outbox (tenant_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, occurred_at)
    VALUES (p_tenant_id, p_aggregate_type, p_aggregate_id, v_seq, p_event_type, v_payload, compute.compute_now());
    PERFORM pg_catalog.pg_notify('bc_outbox', '');  -- identical notifications of one transaction are sent once
END
$function$;

COMMENT ON FUNCTION compute.outbox_emit(uuid,text,text,text,jsonb) IS 'Write one event of an aggregate, numbered in sequence, and poke readers.';

CREATE OR REPLACE FUNCTION compute.work_poke(p_kind text, p_key text, p_payload jsonb DEFAULT '{}'::jsonb, p_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_priority integer DEFAULT 0)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_work_id bigint;
BEGIN
    IF p_kind IS NULL OR p_kind !~ '^[a-z][a-z0-9_.]{0,62}$' OR p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid work kind %L or key %L', p_kind, p_key),
            'A kind is lower-case letters, digits, "_" and "."; a key is 1-200 characters.');
    END IF;
    -- Coalesce: an item already pending for the key runs once, as early and as urgently as asked;
    -- one already running is flagged to run again when it completes.
    INSERT INTO compute.work AS w (kind, key, payload, priority, state, run_at, max_attempts, created_at, updated_at)
    VALUES (p_kind, p_key, coalesce(p_payload, '{}'), p_priority, 'pending', coalesce(p_run_at, v_now),
            compute.limit('work_attempts'), v_now, v_now)
    ON CONFLICT (kind, key) WHERE state IN ('pending', 'running') DO UPDATE
        SET payload = EXCLUDED.payload,
            priority = greatest(w.priority, EXCLUDED.priority),
            run_at = CASE WHEN w.state = 'pending' THEN least(w.run_at, EXCLUDED.run_at) ELSE w.run_at END,
            repoke = w.state = 'running',
            updated_at = v_now
    RETURNING w.work_id INTO v_work_id;
    PERFORM pg_catalog.pg_notify('bc_work', '');
    RETURN v_work_id;
END
$function$;

COMMENT ON FUNCTION compute.work_poke(text,text,jsonb,timestamp with time zone,integer) IS 'Queue work for (kind, key), coalesced with live work for the same key; NOTIFY bc_work (content-free).';

CREATE OR REPLACE FUNCTION compute.work_retry(p_work_id bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE compute.work SET state = 'pending', attempts = 0, run_at = compute.compute_now(), updated_at = compute.compute_now()
     WHERE work_id = p_work_id AND state = 'dead'
       AND NOT EXISTS (SELECT 1 FROM compute.work AS w
                        WHERE (w.kind, w.key) = (SELECT d.kind, d.key FROM compute.work AS d WHERE d.work_id = p_work_id)
                          AND w.state IN ('pending', 'running'));
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no dead work item %s without live work for its key', p_work_id),
            'List dead items in ops.work_dead; an item whose key has live work is already being retried.');
    END IF;
    PERFORM pg_catalog.pg_notify('bc_work', '');
END
$function$;

-- By hand: the triggers go before their function.
DROP TRIGGER outbox_wake ON compute.outbox;

DROP TRIGGER work_wake ON compute.work;

DROP FUNCTION compute.wake_at_commit();

COMMIT;
