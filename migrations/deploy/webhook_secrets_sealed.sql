-- Deploy better_compute:webhook_secrets_sealed to pg
-- Webhook secrets at rest (issue 11 C3): stored only sealed to a worker's X25519 key, which the
-- database never holds. Workers register their public keys (compute.sealing_keys); the relay seals
-- webhooks.create's `secret` into `sealed_secret` with the newest (api.sealing_key); the database
-- refuses a plaintext one (compute.input_check: the catalog marks it x-sealed-as; and a trigger on
-- compute.webhooks); IAM's attributes and the resolver leave out writeOnly fields
-- (compute.iam_attributes); deliveries carry the box, which the worker opens.
-- Existing rows keep their plaintext `secret` (a migration cannot seal: no key here) until a worker
-- starts and reseals them (worker_api.webhook_secrets_to_reseal / webhook_secret_resealed, which
-- NULL the column); until then their deliveries wait. ops.webhook_secrets_unsealed lists them.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP FUNCTION compute.webhook_due(bigint,bigint,integer);

DROP FUNCTION worker_api.webhook_due(bigint,bigint,integer);

CREATE TABLE compute.sealing_keys (
    key_id     text PRIMARY KEY,
    public_key bytea NOT NULL UNIQUE CHECK (octet_length(public_key) = 32),
    created_at timestamptz NOT NULL,
    CONSTRAINT sealing_keys_key_id_names_the_key
        CHECK (key_id = pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(public_key), 'hex'), 16))
);

ALTER TABLE compute.webhooks
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_key_id text REFERENCES compute.sealing_keys,
    ADD COLUMN secret_sealed bytea CHECK (octet_length(secret_sealed) BETWEEN 64 AND 848),
    ADD CONSTRAINT webhooks_secret_one_form
        CHECK ((secret_key_id IS NULL) = (secret_sealed IS NULL) AND (secret IS NULL) <> (secret_sealed IS NULL));

DROP TYPE compute.webhook_delivery;

CREATE TYPE compute.webhook_delivery AS (delivery_id uuid, event_id bigint, event_type text, url text, secret_key_id text,
                                         secret_sealed bytea, attempts integer, body jsonb);

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION api.resolve(p_type text, p_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
DECLARE
    v_answer jsonb := compute.resource_describe(p_type, p_id);
BEGIN
    IF v_answer IS NULL THEN  -- a resource being created: its pending admission is the provisional row
        SELECT compute.resource_json(a.tenant_id, m.parent_type, a.parent_id, compute.iam_attributes(m, a.attributes) || '{"provisional": true}')
          INTO v_answer
          FROM compute.admissions AS a JOIN api.methods AS m ON m.method = a.method
         WHERE a.resource_id = p_id AND a.state = 'pending' AND m.resource_type = p_type
         ORDER BY a.created_at DESC LIMIT 1;
    END IF;
    IF v_answer IS NULL THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no %s %s', p_type, p_id), 'Resolve only ids Better Compute issued.');
    END IF;
    RETURN v_answer;
END
$function$;

COMMENT ON FUNCTION api.resolve(text,text) IS 'Better IAM''s resolveResource: tenant, parent and attributes of a resource, provisional ones included (secrets left out).';

CREATE OR REPLACE FUNCTION api.sealing_key()
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT pg_catalog.jsonb_build_object('key_id', k.key_id, 'public_key', pg_catalog.encode(k.public_key, 'hex'))
      FROM compute.sealing_keys AS k ORDER BY k.created_at DESC, k.key_id LIMIT 1;
$function$;

COMMENT ON FUNCTION api.sealing_key() IS 'The X25519 public key the relay seals secrets to (the newest a worker registered), hex; NULL while none is.';

GRANT EXECUTE ON FUNCTION api.sealing_key() TO bc_api;

CREATE OR REPLACE FUNCTION compute.api_webhooks_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_types jsonb := coalesce(compute.request_field(p_input, 'event_types', 'array', false), '[]');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_types) AS t WHERE pg_catalog.jsonb_typeof(t) <> 'string') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'event_types is a list of strings', 'e.g. ["reservation.*"]');
    END IF;
    PERFORM compute.webhook_create(p_tenant_id, compute.input_text(p_input, 'url'), compute.input_text(p_input, 'sealed_secret'),
        ARRAY(SELECT pg_catalog.jsonb_array_elements_text(v_types)), p_resource_id::uuid);
    RETURN (SELECT compute.webhook_json(w) FROM compute.webhooks AS w WHERE w.webhook_id = p_resource_id::uuid);
END
$function$;

CREATE OR REPLACE FUNCTION compute.iam_attributes(p_method api.methods, p_attributes jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- Secrets stay out of what IAM sees (the authorize request, the resolver): a field the catalog
    -- marks writeOnly (webhooks.create's secret, sealed or not) is left out. Policies never read them.
    SELECT p_attributes - ARRAY(SELECT p.key FROM pg_catalog.jsonb_each(p_method.input_schema -> 'properties') AS p
                                 WHERE p.value -> 'writeOnly' = 'true'::jsonb);
$function$;

COMMENT ON FUNCTION compute.iam_attributes(api.methods,jsonb) IS 'A request''s attributes as IAM sees them: without the fields the catalog marks writeOnly (secrets).';

CREATE OR REPLACE FUNCTION compute.iam_request(p_tenant_id uuid, p_method api.methods, p_resource_id text, p_attributes jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('tenantId', p_tenant_id, 'action', p_method.action,
        'resource', pg_catalog.jsonb_build_object('type', p_method.resource_type, 'id', p_resource_id),
        'attributes', compute.iam_attributes(p_method, p_attributes));
$function$;

COMMENT ON FUNCTION compute.iam_request(uuid,api.methods,text,jsonb) IS 'The IAM request of a method on a resource (Better IAM''s authorize body), secrets left out.';

CREATE OR REPLACE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
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
    -- A secret the catalog marks x-sealed-as never reaches the database in plain text (P14): the
    -- relay seals it into that field; here it is refused before anything is written.
    SELECT k INTO v_field FROM pg_catalog.jsonb_each(p_input) AS e(k, v)
     WHERE e.v <> 'null' AND p_schema #> ARRAY['properties', e.k] ? 'x-sealed-as' ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s reaches the database only sealed', v_field),
            pg_catalog.format('Send it through the HTTP relay, which seals it into %s with the worker''s key; at psql pass %s, '
                              'sealed to the key in ops.sealing_keys (docs/worker.md).',
                              p_schema #>> ARRAY['properties', v_field, 'x-sealed-as'], p_schema #>> ARRAY['properties', v_field, 'x-sealed-as']));
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
$function$;

CREATE OR REPLACE FUNCTION compute.sealed_secret_parse(p_sealed text, OUT key_id text, OUT box bytea)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.sealed_secret_parse(text) IS 'The key id and box of a sealed secret (bcs1:<key id>:<base64>); INVALID_ARGUMENT unless well formed and sealed to a registered key.';

DROP FUNCTION compute.webhook_create(uuid,text,text,text[],uuid);

CREATE OR REPLACE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_sealed_secret text, p_event_types text[] DEFAULT '{}'::text[], p_webhook_id uuid DEFAULT NULL::uuid)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.webhook_create(uuid,text,text,text[],uuid) IS 'Subscribe a tenant''s URL to its events, with its secret sealed (bcs1:<key id>:<base64 box>).';

CREATE OR REPLACE FUNCTION compute.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
 RETURNS SETOF compute.webhook_delivery
 LANGUAGE plpgsql
AS $function$
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
$function$;

COMMENT ON FUNCTION compute.webhook_due(bigint,bigint,integer) IS 'Deliveries due now for the webhook a webhook.deliver item is about, with the sealed secret; FENCED with a stale epoch.';

CREATE OR REPLACE FUNCTION compute.webhook_plaintext_refused()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM compute.raise_error('INVALID_ARGUMENT', 'a webhook secret is stored only sealed',
        'Write secret_key_id and secret_sealed (a box sealed to a key in compute.sealing_keys), never secret.');
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.webhook_plaintext_refused() IS 'Trigger: no plaintext webhook secret is ever written (old rows keep theirs until resealed).';

CREATE OR REPLACE FUNCTION worker_api.sealing_key_register(p_key_id text, p_public_key bytea)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    INSERT INTO compute.sealing_keys (key_id, public_key, created_at) VALUES (p_key_id, p_public_key, compute.compute_now())
    ON CONFLICT (key_id) DO NOTHING;
    IF NOT EXISTS (SELECT 1 FROM compute.sealing_keys AS k WHERE k.key_id = p_key_id AND k.public_key = p_public_key) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('sealing key %s is not the key it names', p_key_id),
            'A key id is the first 16 hex digits of the SHA-256 of the raw 32-byte public key.');
    END IF;
END
$function$;

COMMENT ON FUNCTION worker_api.sealing_key_register(text,bytea) IS 'A worker''s X25519 public key (idempotent); the newest registered is what the relay seals to.';

GRANT EXECUTE ON FUNCTION worker_api.sealing_key_register(text,bytea) TO bc_worker;

CREATE OR REPLACE FUNCTION worker_api.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
 RETURNS SETOF compute.webhook_delivery
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT * FROM compute.webhook_due(p_work_id, p_epoch, p_limit) $function$;

GRANT EXECUTE ON FUNCTION worker_api.webhook_due(bigint,bigint,integer) TO bc_worker;

CREATE OR REPLACE FUNCTION worker_api.webhook_secret_resealed(p_webhook_id uuid, p_from_key_id text, p_key_id text, p_sealed bytea)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    -- Only if the secret is still what the worker read (a plaintext one, or a box of p_from_key_id).
    UPDATE compute.webhooks SET secret = NULL, secret_key_id = p_key_id, secret_sealed = p_sealed
     WHERE webhook_id = p_webhook_id AND secret_key_id IS NOT DISTINCT FROM p_from_key_id;
    RETURN FOUND;
END
$function$;

COMMENT ON FUNCTION worker_api.webhook_secret_resealed(uuid,text,text,bytea) IS 'Store a webhook secret resealed to key p_key_id (the plaintext column NULLed), if it is still as read.';

GRANT EXECUTE ON FUNCTION worker_api.webhook_secret_resealed(uuid,text,text,bytea) TO bc_worker;

CREATE OR REPLACE FUNCTION worker_api.webhook_secrets_to_reseal(p_key_id text, p_from_key_ids text[], p_limit integer)
 RETURNS TABLE(webhook_id uuid, secret text, secret_key_id text, secret_sealed bytea)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
    -- Plaintext from before sealing, and boxes sealed to older keys the worker still holds.
    SELECT w.webhook_id, w.secret, w.secret_key_id, w.secret_sealed
      FROM compute.webhooks AS w
     WHERE w.secret IS NOT NULL OR (w.secret_key_id <> p_key_id AND w.secret_key_id = ANY (p_from_key_ids))
     ORDER BY w.webhook_id
     LIMIT least(p_limit, compute.limit('sweep_batch'));
$function$;

COMMENT ON FUNCTION worker_api.webhook_secrets_to_reseal(text,text[],integer) IS 'Webhook secrets not sealed to key p_key_id that the worker can open: plaintext ones and boxes of the keys p_from_key_ids.';

GRANT EXECUTE ON FUNCTION worker_api.webhook_secrets_to_reseal(text,text[],integer) TO bc_worker;

COMMENT ON TABLE compute.sealing_keys IS 'X25519 public keys of the workers that open sealed secrets; the newest is what the relay seals to.';

COMMENT ON TABLE compute.webhooks IS 'A tenant''s subscription: URL, signing secret (sealed), event types (globs like reservation.*; empty = all).';

COMMENT ON COLUMN compute.webhooks.secret IS 'Only on rows from before secrets were sealed, until a worker reseals them; never written.';

COMMENT ON COLUMN compute.webhooks.secret_sealed IS 'The signing secret, sealed to sealing key secret_key_id (only a worker opens it).';

CREATE TRIGGER webhooks_plaintext_refused BEFORE INSERT OR UPDATE OF secret ON compute.webhooks
    FOR EACH ROW WHEN (NEW.secret IS NOT NULL) EXECUTE FUNCTION compute.webhook_plaintext_refused();

CREATE VIEW ops.sealing_keys AS
    SELECT k.key_id, pg_catalog.encode(k.public_key, 'hex') AS public_key, k.created_at,
           k.key_id = (SELECT n.key_id FROM compute.sealing_keys AS n ORDER BY n.created_at DESC, n.key_id LIMIT 1) AS current,
           (SELECT count(*) FROM compute.webhooks AS w WHERE w.secret_key_id = k.key_id) AS webhook_secrets
      FROM compute.sealing_keys AS k;

COMMENT ON VIEW ops.sealing_keys IS 'Sealing keys, the current one (what the relay seals to), and how many webhook secrets each seals.';

CREATE VIEW ops.webhook_secrets_unsealed AS
    SELECT w.webhook_id, w.tenant_id, w.created_at FROM compute.webhooks AS w WHERE w.secret IS NOT NULL;

COMMENT ON VIEW ops.webhook_secrets_unsealed IS 'Webhooks whose secret is still plaintext (from before sealing): a worker reseals them when it starts.';

UPDATE api.methods
   SET summary = 'Subscribe a URL to the tenant''s events (signed with the secret, which only the worker can read).',
       input_schema = '{"type":"object","properties":{"url":{"type":"string","minLength":1,"maxLength":2000,"pattern":"^https?://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\\.?)(:[0-9]{1,5})?([/?#][^\\s]*)?$"},"secret":{"type":"string","minLength":16,"maxLength":200,"writeOnly":true,"x-sealed-as":"sealed_secret"},"sealed_secret":{"type":"string","maxLength":1200,"pattern":"^bcs1:[0-9a-f]{16}:[A-Za-z0-9+/]+={0,2}$","writeOnly":true},"event_types":{"type":"array","maxItems":50,"items":{"type":"string","minLength":1,"maxLength":100}},"idempotency_key":{"type":"string","minLength":1,"maxLength":200}},"required":["url"],"anyOf":[{"required":["secret"]},{"required":["sealed_secret"]}],"additionalProperties":false}'
 WHERE method = 'webhooks.create';

COMMIT;
