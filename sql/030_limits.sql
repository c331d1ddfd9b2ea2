-- Bounds (P12, docs/architecture.md §14): every queue, batch, payload and buffer has its limit here, in one place.
-- Operators read them in ops.limits; code reads one with compute.limit(name), which fails closed:
-- an unknown name is an error, never a silent "no limit".
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.limits (
    name        text CONSTRAINT limits_pkey PRIMARY KEY CONSTRAINT limits_name_check CHECK (name ~ '^[a-z][a-z0-9_]*$'),
    value       bigint NOT NULL CONSTRAINT limits_value_check CHECK (value > 0),
    unit        text NOT NULL CONSTRAINT limits_unit_check CHECK (unit IN ('bytes', 'count', 'seconds')),
    description text NOT NULL
);
COMMENT ON TABLE compute.limits IS 'Every bound of the system, in one place (P12).';

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('http_body_bytes',               65536, 'bytes',   'Largest HTTP request body the relay accepts.'),
    ('node_message_bytes',          1048576, 'bytes',   'Largest message on a node session, either way.'),
    ('commands_pending_per_node',        64, 'count',   'Commands queued and not yet finished, per node.'),
    ('deliveries_pending_per_webhook', 10000, 'count',  'Webhook deliveries not yet delivered or dead, per subscription.'),
    ('atoms_per_reservation',            64, 'count',   'Atoms one reservation may book.'),
    ('reservation_window_seconds',  7776000, 'seconds', 'Longest reservation window (90 days).'),
    ('metric_label_values',            1000, 'count',   'Distinct values of one metric label.'),
    ('outbox_payload_bytes',          16384, 'bytes',   'Largest event payload in the outbox.'),
    ('command_output_bytes',          65536, 'bytes',   'Largest command result kept.'),
    ('provisional_seconds',              60, 'seconds', 'How long a provisional reservation holds its atoms before it is voided.'),
    ('hold_seconds_max',              86400, 'seconds', 'Longest lease (hold_seconds) of a reservation.'),
    ('placement_candidates',             16, 'count',   'Free atoms one placement considers (at least 8 per atom a request asks for).'),
    ('devices_per_node',                 64, 'count',   'GPUs one node may report.'),
    ('timeslice_slots',                  64, 'count',   'Most time-slice slots of one GPU.'),
    ('sweep_batch',                    1000, 'count',   'Reservations one expiry sweep ends.'),
    ('capacity_search_horizon_seconds', 7776000, 'seconds', 'How far ahead capacity_earliest looks (90 days).'),
    ('work_attempts',                    10, 'count',   'Attempts of one work item before it is dead.'),
    ('work_claim_batch',                100, 'count',   'Work items one claim may take.'),
    ('work_backoff_base_seconds',         1, 'seconds', 'First retry delay of failed work (doubles per attempt, 50-100 % jitter).'),
    ('work_backoff_cap_seconds',        600, 'seconds', 'Longest retry delay of failed work.'),
    ('outbox_read_batch',              1000, 'count',   'Events one outbox read returns.'),
    ('outbox_retention_seconds',     604800, 'seconds', 'How long delivered events stay in the outbox (7 days).'),
    ('webhook_attempts',                 25, 'count',   'Delivery attempts before a webhook delivery is dead-lettered.'),
    ('webhook_backoff_base_seconds',     30, 'seconds', 'First webhook retry delay (doubles per attempt).'),
    ('webhook_backoff_cap_seconds',    3600, 'seconds', 'Longest webhook retry delay.'),
    ('webhook_timeout_seconds',          10, 'seconds', 'How long one webhook POST may take.'),
    ('webhooks_per_tenant',              20, 'count',   'Webhook subscriptions of one tenant.'),
    ('usage_export_batch',              500, 'count',   'Usage windows one export sends.'),
    ('webhook_delivery_batch',          100, 'count',   'Deliveries of one webhook one run sends.'),
    ('work_done_retention_seconds',   86400, 'seconds', 'How long done work items are kept (1 day).'),
    ('admission_seconds',                60, 'seconds', 'How long an admission waits for its IAM decision before it is voided.'),
    ('admission_retention_seconds',   86400, 'seconds', 'How long decided admissions are kept for idempotent replays (1 day).'),
    ('api_list_rows',                  1000, 'count',   'Rows one API list answers.'),
    ('join_token_ttl_seconds',         3600, 'seconds', 'Default lifetime of a join token.'),
    ('join_token_ttl_seconds_max',   604800, 'seconds', 'Longest lifetime of a join token (7 days).'),
    ('session_timeout_seconds',          30, 'seconds', 'A node session not heard from for this long shows Connected=False (nothing else changes).'),
    ('node_spec_tick_window_seconds',   600, 'seconds', 'How far back the spec tick looks for bookings that started or ended.'),
    ('node_spec_resend_seconds',         30, 'seconds', 'How long a connected node may leave a signed spec unconfirmed before it is sent again.'),
    ('node_command_redelivery_seconds',  60, 'seconds', 'How long a delivered command may stay without a result before it is delivered again.'),
    ('admissions_pending_per_tenant',   256, 'count',   'Admissions waiting for their IAM decision, per tenant (more: QUOTA_EXCEEDED before anything is held).'),
    ('admissions_pending_per_credential', 16, 'count',  'Admissions waiting for their IAM decision, per caller credential (more: QUOTA_EXCEEDED before anything is held).'),
    ('analyze_changed_rows',            200, 'count',   'Rows a table must have gained, lost or changed since it was last analysed (and at least as many as it then had) before the worker analyses it.');

CREATE FUNCTION compute.limit(p_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_value bigint;
BEGIN
    SELECT l.value INTO v_value FROM compute.limits AS l WHERE l.name = p_name;
    IF v_value IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no limit named %L', p_name),
            'The known limits are listed in ops.limits.');
    END IF;
    RETURN v_value;
END
$$;
COMMENT ON FUNCTION compute.limit(text) IS 'The value of one limit; an unknown name raises NOT_FOUND (fail closed).';

CREATE FUNCTION compute.limits_get(p_names text[])
RETURNS bigint[]
LANGUAGE plpgsql STABLE
AS $$
-- Several limits in one statement, in the order named (a hot path reads what it needs once); an
-- unknown name raises NOT_FOUND like compute.limit.
DECLARE
    v_values bigint[];
    v_found  integer;
BEGIN
    SELECT pg_catalog.array_agg(l.value ORDER BY n.ord), pg_catalog.count(l.value) INTO v_values, v_found
      FROM pg_catalog.unnest(p_names) WITH ORDINALITY AS n(name, ord)
      LEFT JOIN compute.limits AS l ON l.name = n.name;
    IF v_found < pg_catalog.cardinality(p_names) THEN
        PERFORM compute.limit(n.name) FROM pg_catalog.unnest(p_names) AS n(name);  -- raises for the unknown one
    END IF;
    RETURN v_values;
END
$$;
COMMENT ON FUNCTION compute.limits_get(text[]) IS 'The values of several limits, in the order named; an unknown name raises NOT_FOUND (fail closed).';

CREATE VIEW ops.limits AS
    SELECT l.name, l.value, l.unit, l.description FROM compute.limits AS l;
COMMENT ON VIEW ops.limits IS 'Every bound of the system (P12).';
