-- Webhooks (docs/architecture.md §9): per-tenant subscriptions; deliveries at least once, signed, retried with
-- exponential backoff (30 s doubling to 1 h), dead-lettered after webhook_attempts (25).
--
-- Fan-out (work kind outbox.fan_out): one consumer cursor, locked while it runs, reads new events
-- (compute.outbox_read) and writes one delivery per matching subscription in the same transaction
-- as it moves the cursor: no event is fanned out twice or skipped. Sending (work kind
-- webhook.deliver, key = the webhook): one work item per subscription, so a slow or failing
-- endpoint holds only its own item, never another tenant's deliveries. Every result is written
-- under the work item's lease epoch (FENCED otherwise); a delivery keeps its id on every retry.
--
-- Secrets at rest (P14, issue 11 C3): a webhook's signing secret is stored only sealed to a
-- worker's X25519 key (py/better_compute/sealing.py): the relay seals it with the newest public key
-- a worker registered (compute.sealing_keys, api.sealing_key), the row holds the key id and the
-- box, and only the worker, which holds the private key in a file, opens it to sign a delivery.
-- A plaintext secret is refused on the way in (compute.input_check: the catalog marks the field
-- x-sealed-as) and by the table (trigger). Rows from before sealing keep their plaintext in
-- `secret` until a worker starts: it reseals them (worker_api.webhook_secrets_to_reseal) and the
-- column is NULLed; a worker started with a new key reseals what an old key it still holds sealed.
SET LOCAL ROLE bc_owner;

-- What a webhook URL may be: the sender (py/better_compute/webhooks.py, urllib) must be able to
-- parse it, so a subscription never turns into deliveries that fail before they are sent.
-- http or https; a host that is a DNS name (letters, digits, '-', '_'; labels of 1 to 63), a
-- dotted IPv4 address or a bracketed IPv6 literal; an optional port 1-65535; no user:password@
-- (the signing secret is the credential); then an optional path, query or fragment of printable
-- characters without spaces; at most 2000 characters in all.
CREATE FUNCTION compute.webhook_url_valid(p_url text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_parts text[];
BEGIN
    IF p_url IS NULL OR pg_catalog.length(p_url) > 2000 THEN
        RETURN false;
    END IF;
    -- Scheme and authority: the authority ends at the first '/', '?' or '#'.
    v_parts := pg_catalog.regexp_match(p_url, '^https?://([^/?#[:space:][:cntrl:]]+)([/?#][^[:space:][:cntrl:]]*)?$');
    IF v_parts IS NULL THEN
        RETURN false;
    END IF;
    -- Host and port (ARE repetition counts stop at 255, so the host's length is checked apart).
    v_parts := pg_catalog.regexp_match(v_parts[1],
        '^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?)(:([0-9]{1,5}))?$');
    IF v_parts IS NULL OR pg_catalog.length(v_parts[1]) > 255
       OR (v_parts[6] IS NOT NULL AND v_parts[6]::integer NOT BETWEEN 1 AND 65535) THEN
        RETURN false;
    END IF;
    IF pg_catalog.left(v_parts[1], 1) <> '[' THEN
        RETURN true;
    END IF;
    -- A bracketed literal must be an IPv6 address (an IPv4 address may not be in brackets).
    BEGIN
        RETURN pg_catalog.family(pg_catalog.btrim(v_parts[1], '[]')::inet) = 6;
    EXCEPTION WHEN invalid_text_representation THEN
        RETURN false;
    END;
END
$$;
COMMENT ON FUNCTION compute.webhook_url_valid(text) IS 'Whether a URL may be a webhook''s: http(s), a DNS name, IPv4 or bracketed IPv6 host, port 1-65535, no user info, printable, at most 2000 characters.';

CREATE TABLE compute.sealing_keys (
    key_id     text CONSTRAINT sealing_keys_pkey PRIMARY KEY,
    public_key bytea NOT NULL CONSTRAINT sealing_keys_public_key_key UNIQUE CONSTRAINT sealing_keys_public_key_check CHECK (octet_length(public_key) = 32),
    created_at timestamptz NOT NULL,
    CONSTRAINT sealing_keys_key_id_names_the_key
        CHECK (key_id = pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(public_key), 'hex'), 16))
);
COMMENT ON TABLE compute.sealing_keys IS 'X25519 public keys of the workers that open sealed secrets; the newest is what the relay seals to.';

CREATE TABLE compute.webhooks (
    webhook_id    uuid CONSTRAINT webhooks_pkey PRIMARY KEY,
    tenant_id     uuid NOT NULL CONSTRAINT webhooks_tenant_id_fkey REFERENCES compute.tenants,
    url           text NOT NULL CONSTRAINT webhooks_url_check CHECK (compute.webhook_url_valid(url)),
    secret        text CONSTRAINT webhooks_secret_check CHECK (length(secret) BETWEEN 16 AND 200),
    event_types   text[] NOT NULL DEFAULT '{}',
    active        boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL,
    secret_key_id text CONSTRAINT webhooks_secret_key_id_fkey REFERENCES compute.sealing_keys,
    -- 32-byte ephemeral key, 16 to 800 bytes of ciphertext (200 characters of UTF-8), 16-byte tag
    secret_sealed bytea CONSTRAINT webhooks_secret_sealed_check CHECK (octet_length(secret_sealed) BETWEEN 64 AND 848),
    CONSTRAINT webhooks_secret_one_form
        CHECK ((secret_key_id IS NULL) = (secret_sealed IS NULL) AND (secret IS NULL) <> (secret_sealed IS NULL))
);
CREATE INDEX webhooks_tenant ON compute.webhooks (tenant_id) WHERE active;
COMMENT ON TABLE compute.webhooks IS 'A tenant''s subscription: URL, signing secret (sealed), event types (globs like reservation.*; empty = all).';
COMMENT ON COLUMN compute.webhooks.secret IS 'Only on rows from before secrets were sealed, until a worker reseals them; never written.';
COMMENT ON COLUMN compute.webhooks.secret_sealed IS 'The signing secret, sealed to sealing key secret_key_id (only a worker opens it).';

CREATE FUNCTION compute.webhook_plaintext_refused()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.raise_error('INVALID_ARGUMENT', 'a webhook secret is stored only sealed',
        'Write secret_key_id and secret_sealed (a box sealed to a key in compute.sealing_keys), never secret.');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.webhook_plaintext_refused() IS 'Trigger: no plaintext webhook secret is ever written (old rows keep theirs until resealed).';
CREATE TRIGGER webhooks_plaintext_refused BEFORE INSERT OR UPDATE OF secret ON compute.webhooks
    FOR EACH ROW WHEN (NEW.secret IS NOT NULL) EXECUTE FUNCTION compute.webhook_plaintext_refused();

CREATE FUNCTION compute.sealed_secret_parse(p_sealed text, OUT key_id text, OUT box bytea)
LANGUAGE plpgsql STABLE
AS $$
-- A sealed secret as the API takes it, `bcs1:<key id>:<base64 box>`: a box of a secret of 16 to 200
-- characters, sealed to a registered key.
DECLARE
    v_parts text[] := pg_catalog.regexp_match(p_sealed, '^bcs1:([0-9a-f]{16}):([A-Za-z0-9+/]+={0,2})$');
BEGIN
    IF v_parts IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'sealed_secret is not bcs1:<key id>:<base64 box>',
            'Send the plaintext secret through the HTTP relay, which seals it.');
    END IF;
    BEGIN
        box := pg_catalog.decode(v_parts[2], 'base64');
    EXCEPTION WHEN invalid_parameter_value THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'sealed_secret''s box is not base64', 'Send the box as standard base64.');
    END;
    IF pg_catalog.octet_length(box) NOT BETWEEN 64 AND 848 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a webhook secret has 16 to 200 characters', 'Use a long random secret.');
    END IF;
    key_id := v_parts[1];
    IF NOT EXISTS (SELECT 1 FROM compute.sealing_keys AS k WHERE k.key_id = v_parts[1]) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('sealed_secret is sealed to key %s, which no worker registered', key_id),
            'Seal to the key api.sealing_key() answers (ops.sealing_keys), or send the plaintext through the HTTP relay.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.sealed_secret_parse(text) IS 'The key id and box of a sealed secret (bcs1:<key id>:<base64>); INVALID_ARGUMENT unless well formed and sealed to a registered key.';

CREATE TABLE compute.webhook_deliveries (
    delivery_id     uuid CONSTRAINT webhook_deliveries_pkey PRIMARY KEY,
    webhook_id      uuid NOT NULL CONSTRAINT webhook_deliveries_webhook_id_fkey REFERENCES compute.webhooks ON DELETE CASCADE,
    event_id        bigint NOT NULL CONSTRAINT webhook_deliveries_event_id_fkey REFERENCES compute.outbox ON DELETE CASCADE,
    state           text NOT NULL CONSTRAINT webhook_deliveries_state_check CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    CONSTRAINT webhook_deliveries_webhook_id_event_id_key UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON compute.webhook_deliveries (webhook_id, next_attempt_at, event_id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_event ON compute.webhook_deliveries (event_id) WHERE state = 'pending';
COMMENT ON TABLE compute.webhook_deliveries IS 'One event to one subscription; the delivery id is the same on every attempt.';

-- The fan-out's cursor exists from the start, so pruning (which keeps what a consumer has not read)
-- never takes an event that was never fanned out.
INSERT INTO compute.outbox_cursors (consumer, updated_at) VALUES ('webhooks', '-infinity');

CREATE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_sealed_secret text, p_event_types text[] DEFAULT '{}',
                                       p_webhook_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_webhook_id uuid := coalesce(p_webhook_id, pg_catalog.gen_random_uuid());
    v_sealed     record;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF NOT coalesce(compute.webhook_url_valid(p_url), false) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid webhook URL %L', pg_catalog.left(p_url, 200)),
            'Pass an http(s) URL of at most 2000 characters whose host is a DNS name, an IPv4 address or a bracketed IPv6 address, with an optional port 1-65535 and no user:password@.');
    END IF;
    v_sealed := compute.sealed_secret_parse(p_sealed_secret);
    IF (SELECT count(*) FROM compute.webhooks AS w WHERE w.tenant_id = p_tenant_id AND w.active) >= compute.limit('webhooks_per_tenant') THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED', 'this tenant has as many webhooks as it may',
            pg_catalog.format('Delete one first (limit webhooks_per_tenant = %s).', compute.limit('webhooks_per_tenant')));
    END IF;
    INSERT INTO compute.webhooks (webhook_id, tenant_id, url, secret_key_id, secret_sealed, event_types, created_at)
    VALUES (v_webhook_id, p_tenant_id, p_url, v_sealed.key_id, v_sealed.box, coalesce(p_event_types, '{}'), compute.compute_now());
    RETURN v_webhook_id;
END
$$;
COMMENT ON FUNCTION compute.webhook_create(uuid, text, text, text[], uuid) IS 'Subscribe a tenant''s URL to its events, with its secret sealed (bcs1:<key id>:<base64 box>).';

CREATE FUNCTION compute.webhook_matches(p_event_types text[], p_event_type text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.cardinality(p_event_types) = 0
        OR EXISTS (SELECT 1 FROM pg_catalog.unnest(p_event_types) AS t
                    WHERE p_event_type LIKE pg_catalog.replace(pg_catalog.replace(t, '_', '\_'), '*', '%'))
$$;
COMMENT ON FUNCTION compute.webhook_matches(text[], text) IS 'Whether an event type matches a subscription''s globs (empty = all).';

CREATE FUNCTION compute.webhooks_fan_out()
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: the cursor row FOR UPDATE (one fan-out at a time), then new delivery rows.
DECLARE
    v_cursor compute.outbox_cursors;
    v_last   compute.outbox_event;
    v_count  integer := 0;
BEGIN
    INSERT INTO compute.outbox_cursors (consumer, updated_at) VALUES ('webhooks', compute.compute_now())
    ON CONFLICT (consumer) DO NOTHING;
    SELECT * INTO v_cursor FROM compute.outbox_cursors AS c WHERE c.consumer = 'webhooks' FOR UPDATE;

    CREATE TEMP TABLE IF NOT EXISTS pg_temp.fan_out_batch OF compute.outbox_event ON COMMIT DROP;
    DELETE FROM pg_temp.fan_out_batch;
    INSERT INTO pg_temp.fan_out_batch SELECT * FROM compute.outbox_read(v_cursor.xid, v_cursor.event_id);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count = 0 THEN
        RETURN 0;
    END IF;

    -- One delivery per matching subscription; past the backlog bound a delivery is dead at once
    -- (visible to operators, replayable) instead of growing the queue without limit (P12).
    INSERT INTO compute.webhook_deliveries (delivery_id, webhook_id, event_id, state, next_attempt_at, last_error, created_at)
    SELECT pg_catalog.gen_random_uuid(), w.webhook_id, e.event_id,
           CASE WHEN backlog.n >= compute.limit('deliveries_pending_per_webhook') THEN 'dead' ELSE 'pending' END,
           compute.compute_now(),
           CASE WHEN backlog.n >= compute.limit('deliveries_pending_per_webhook') THEN 'backlog bound reached' END,
           compute.compute_now()
      FROM pg_temp.fan_out_batch AS e
      JOIN compute.webhooks AS w ON w.tenant_id = e.tenant_id AND w.active AND compute.webhook_matches(w.event_types, e.event_type)
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM compute.webhook_deliveries AS d
                          WHERE d.webhook_id = w.webhook_id AND d.state = 'pending') AS backlog
    ON CONFLICT (webhook_id, event_id) DO NOTHING;

    PERFORM compute.work_poke('webhook.deliver', w.webhook_id::text)
       FROM compute.webhooks AS w
      WHERE EXISTS (SELECT 1 FROM pg_temp.fan_out_batch AS e
                     WHERE e.tenant_id = w.tenant_id AND w.active AND compute.webhook_matches(w.event_types, e.event_type));

    SELECT * INTO v_last FROM pg_temp.fan_out_batch AS e ORDER BY e.xid DESC, e.event_id DESC LIMIT 1;
    UPDATE compute.outbox_cursors SET xid = v_last.xid, event_id = v_last.event_id, updated_at = compute.compute_now()
     WHERE consumer = 'webhooks';
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION compute.webhooks_fan_out() IS 'Turn new outbox events into webhook deliveries and move the cursor, in one transaction; returns events read.';

CREATE TYPE compute.webhook_delivery AS (delivery_id uuid, event_id bigint, event_type text, url text, secret_key_id text,
                                         secret_sealed bytea, attempts integer, body jsonb);

CREATE FUNCTION compute.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
RETURNS SETOF compute.webhook_delivery
LANGUAGE plpgsql
AS $$
DECLARE
    v_work compute.work := compute.work_fenced(p_work_id, p_epoch);
BEGIN
    RETURN QUERY
    SELECT d.delivery_id, o.event_id, o.event_type, w.url, w.secret_key_id, w.secret_sealed, d.attempts,
           pg_catalog.jsonb_build_object('id', o.event_id, 'type', o.event_type, 'tenant_id', o.tenant_id,
                                         'aggregate', pg_catalog.jsonb_build_object('type', o.aggregate_type, 'id', o.aggregate_id,
                                                                                    'seq', o.aggregate_seq),
                                         'occurred_at', o.occurred_at, 'data', o.payload)
      FROM compute.webhook_deliveries AS d
      JOIN compute.webhooks AS w ON w.webhook_id = d.webhook_id
      JOIN compute.outbox AS o ON o.event_id = d.event_id
     WHERE d.webhook_id = v_work.key::uuid AND d.state = 'pending' AND d.next_attempt_at <= compute.compute_now()
       AND w.secret_sealed IS NOT NULL  -- a secret from before sealing waits until a worker reseals it
     ORDER BY d.next_attempt_at, d.event_id
     LIMIT least(coalesce(p_limit, compute.limit('webhook_delivery_batch')), compute.limit('webhook_delivery_batch'));
END
$$;
COMMENT ON FUNCTION compute.webhook_due(bigint, bigint, integer) IS 'Deliveries due now for the webhook a webhook.deliver item is about, with the sealed secret; FENCED with a stale epoch.';

CREATE FUNCTION compute.webhook_result(p_work_id bigint, p_epoch bigint, p_delivery_id uuid, p_ok boolean, p_status integer,
                                       p_error text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_work compute.work := compute.work_fenced(p_work_id, p_epoch);
    v_now  timestamptz := compute.compute_now();
BEGIN
    UPDATE compute.webhook_deliveries AS d
       SET attempts = d.attempts + 1, last_status = p_status, last_error = pg_catalog.left(p_error, 2000),
           state = CASE WHEN p_ok THEN 'delivered'
                        WHEN d.attempts + 1 >= compute.limit('webhook_attempts') THEN 'dead' ELSE 'pending' END,
           delivered_at = CASE WHEN p_ok THEN v_now END,
           next_attempt_at = v_now + least(compute.limit('webhook_backoff_cap_seconds'),
                                           compute.limit('webhook_backoff_base_seconds') * 2 ^ d.attempts) * interval '1 second'
     WHERE d.delivery_id = p_delivery_id AND d.webhook_id = v_work.key::uuid AND d.state = 'pending';
END
$$;
COMMENT ON FUNCTION compute.webhook_result(bigint, bigint, uuid, boolean, integer, text) IS
    'Record one attempt: delivered, or retried after 30 s doubling to 1 h, or dead after webhook_attempts.';

CREATE FUNCTION compute.webhook_next_due(p_webhook_id uuid)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT min(d.next_attempt_at) FROM compute.webhook_deliveries AS d WHERE d.webhook_id = p_webhook_id AND d.state = 'pending'
$$;
COMMENT ON FUNCTION compute.webhook_next_due(uuid) IS 'When the webhook''s next pending delivery is due (NULL when none).';

CREATE FUNCTION compute.webhook_replay(p_delivery_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_webhook_id uuid;
BEGIN
    UPDATE compute.webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = compute.compute_now(), last_error = NULL
     WHERE delivery_id = p_delivery_id AND state = 'dead'
    RETURNING webhook_id INTO v_webhook_id;
    IF v_webhook_id IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no dead-lettered delivery %s', p_delivery_id),
            'List dead letters in ops.webhook_dead_letters.');
    END IF;
    PERFORM compute.work_poke('webhook.deliver', v_webhook_id::text);
END
$$;
COMMENT ON FUNCTION compute.webhook_replay(uuid) IS 'Send a dead-lettered delivery again (same delivery id), with fresh attempts.';

CREATE FUNCTION compute.outbox_prune()
RETURNS integer
LANGUAGE sql
AS $$
    -- Delivered events past the retention bound go; an event a webhook has still to deliver stays.
    WITH gone AS (
        DELETE FROM compute.outbox AS o
         WHERE o.occurred_at < compute.compute_now() - compute.limit('outbox_retention_seconds') * interval '1 second'
           AND NOT EXISTS (SELECT 1 FROM compute.webhook_deliveries AS d WHERE d.event_id = o.event_id AND d.state = 'pending')
           AND NOT EXISTS (SELECT 1 FROM compute.outbox_cursors AS c WHERE (o.xid, o.event_id) > (c.xid, c.event_id))
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;
COMMENT ON FUNCTION compute.outbox_prune() IS 'Delete delivered events older than outbox_retention_seconds; returns how many.';

CREATE FUNCTION worker_api.outbox_prune() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.outbox_prune() $$;
CREATE FUNCTION worker_api.webhooks_fan_out() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.webhooks_fan_out() $$;
CREATE FUNCTION worker_api.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
RETURNS SETOF compute.webhook_delivery
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT * FROM compute.webhook_due(p_work_id, p_epoch, p_limit) $$;
CREATE FUNCTION worker_api.webhook_result(p_work_id bigint, p_epoch bigint, p_delivery_id uuid, p_ok boolean, p_status integer,
                                          p_error text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.webhook_result(p_work_id, p_epoch, p_delivery_id, p_ok, p_status, p_error) $$;
CREATE FUNCTION worker_api.webhook_next_due_seconds(p_webhook_id uuid) RETURNS double precision
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT greatest(extract(epoch FROM compute.webhook_next_due(p_webhook_id) - compute.compute_now()), 0)::double precision $$;
CREATE FUNCTION worker_api.webhook_timeout_seconds() RETURNS double precision
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.limit('webhook_timeout_seconds')::double precision $$;
COMMENT ON FUNCTION worker_api.webhook_timeout_seconds() IS 'How long one webhook POST may take (limit webhook_timeout_seconds).';

CREATE VIEW ops.webhook_dead_letters AS
    SELECT d.delivery_id, w.tenant_id, w.url, o.event_type, d.event_id, d.attempts, d.last_status, d.last_error, d.created_at
      FROM compute.webhook_deliveries AS d
      JOIN compute.webhooks AS w ON w.webhook_id = d.webhook_id
      JOIN compute.outbox AS o ON o.event_id = d.event_id
     WHERE d.state = 'dead';
COMMENT ON VIEW ops.webhook_dead_letters IS 'Deliveries that gave up; ops.webhook_replay(delivery_id) sends one again.';
COMMENT ON COLUMN ops.webhook_dead_letters.delivery_id IS 'The delivery: ops.webhook_replay(delivery_id) sends it again.';
COMMENT ON COLUMN ops.webhook_dead_letters.tenant_id IS 'The webhook''s tenant.';
COMMENT ON COLUMN ops.webhook_dead_letters.url IS 'Where it was sent.';
COMMENT ON COLUMN ops.webhook_dead_letters.event_type IS 'The event''s type.';
COMMENT ON COLUMN ops.webhook_dead_letters.event_id IS 'The outbox event.';
COMMENT ON COLUMN ops.webhook_dead_letters.attempts IS 'Attempts it had.';
COMMENT ON COLUMN ops.webhook_dead_letters.last_status IS 'The last HTTP status (NULL: no answer).';
COMMENT ON COLUMN ops.webhook_dead_letters.last_error IS 'The last failure.';
COMMENT ON COLUMN ops.webhook_dead_letters.created_at IS 'When the delivery was queued.';
CREATE FUNCTION ops.webhook_replay(p_delivery_id uuid) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.webhook_replay(p_delivery_id) $$;
COMMENT ON FUNCTION ops.webhook_replay(uuid) IS 'Send a dead-lettered webhook delivery again.';

-- -- sealing keys: registered by workers, resealing, what the relay seals to ---------------------------

CREATE FUNCTION worker_api.sealing_key_register(p_key_id text, p_public_key bytea) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
BEGIN
    INSERT INTO compute.sealing_keys (key_id, public_key, created_at) VALUES (p_key_id, p_public_key, compute.compute_now())
    ON CONFLICT (key_id) DO NOTHING;
    IF NOT EXISTS (SELECT 1 FROM compute.sealing_keys AS k WHERE k.key_id = p_key_id AND k.public_key = p_public_key) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('sealing key %s is not the key it names', p_key_id),
            'A key id is the first 16 hex digits of the SHA-256 of the raw 32-byte public key.');
    END IF;
END
$$;
COMMENT ON FUNCTION worker_api.sealing_key_register(text, bytea) IS 'A worker''s X25519 public key (idempotent); the newest registered is what the relay seals to.';

CREATE FUNCTION worker_api.webhook_secrets_to_reseal(p_key_id text, p_from_key_ids text[], p_limit integer)
RETURNS TABLE (webhook_id uuid, secret text, secret_key_id text, secret_sealed bytea)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$
    -- Plaintext from before sealing, and boxes sealed to older keys the worker still holds.
    SELECT w.webhook_id, w.secret, w.secret_key_id, w.secret_sealed
      FROM compute.webhooks AS w
     WHERE w.secret IS NOT NULL OR (w.secret_key_id <> p_key_id AND w.secret_key_id = ANY (p_from_key_ids))
     ORDER BY w.webhook_id
     LIMIT least(p_limit, compute.limit('sweep_batch'));
$$;
COMMENT ON FUNCTION worker_api.webhook_secrets_to_reseal(text, text[], integer) IS
    'Webhook secrets not sealed to key p_key_id that the worker can open: plaintext ones and boxes of the keys p_from_key_ids.';

CREATE FUNCTION worker_api.webhook_secret_resealed(p_webhook_id uuid, p_from_key_id text, p_key_id text, p_sealed bytea)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''
AS $$
BEGIN
    -- Only if the secret is still what the worker read (a plaintext one, or a box of p_from_key_id).
    UPDATE compute.webhooks SET secret = NULL, secret_key_id = p_key_id, secret_sealed = p_sealed
     WHERE webhook_id = p_webhook_id AND secret_key_id IS NOT DISTINCT FROM p_from_key_id;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION worker_api.webhook_secret_resealed(uuid, text, text, bytea) IS
    'Store a webhook secret resealed to key p_key_id (the plaintext column NULLed), if it is still as read.';

CREATE FUNCTION api.sealing_key()
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$
    SELECT pg_catalog.jsonb_build_object('key_id', k.key_id, 'public_key', pg_catalog.encode(k.public_key, 'hex'))
      FROM compute.sealing_keys AS k ORDER BY k.created_at DESC, k.key_id LIMIT 1;
$$;
COMMENT ON FUNCTION api.sealing_key() IS 'The X25519 public key the relay seals secrets to (the newest a worker registered), hex; NULL while none is.';

CREATE VIEW ops.sealing_keys AS
    SELECT k.key_id, pg_catalog.encode(k.public_key, 'hex') AS public_key, k.created_at,
           k.key_id = (SELECT n.key_id FROM compute.sealing_keys AS n ORDER BY n.created_at DESC, n.key_id LIMIT 1) AS current,
           (SELECT count(*) FROM compute.webhooks AS w WHERE w.secret_key_id = k.key_id) AS webhook_secrets
      FROM compute.sealing_keys AS k;
COMMENT ON VIEW ops.sealing_keys IS 'Sealing keys, the current one (what the relay seals to), and how many webhook secrets each seals.';
CREATE VIEW ops.webhook_secrets_unsealed AS
    SELECT w.webhook_id, w.tenant_id, w.created_at FROM compute.webhooks AS w WHERE w.secret IS NOT NULL;
COMMENT ON VIEW ops.webhook_secrets_unsealed IS 'Webhooks whose secret is still plaintext (from before sealing): a worker reseals them when it starts.';
