-- Revert better_compute:webhook_secrets_sealed from pg
-- A sealed secret cannot go back to plaintext here (the database holds no private key): the revert
-- stops while any webhook has one, naming how many.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DO $$
DECLARE
    v_sealed bigint := (SELECT count(*) FROM compute.webhooks WHERE secret IS NULL);
BEGIN
    IF v_sealed > 0 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s webhooks have only a sealed secret', v_sealed),
            'Only a worker can open them: delete those webhooks (webhooks.delete, then DELETE FROM compute.webhooks) before reverting.');
    END IF;
END
$$;

UPDATE api.methods
   SET summary = 'Subscribe a URL to the tenant''s events (signed with the secret).',
       input_schema = pg_catalog.jsonb_set(pg_catalog.jsonb_set((input_schema - 'anyOf') #- '{properties,sealed_secret}',
                                                                '{properties,secret}',
                                                                pg_catalog.jsonb_build_object('type', 'string', 'minLength', 16, 'maxLength', 200)),
                                           '{required}', pg_catalog.jsonb_build_array('url', 'secret'))
 WHERE method = 'webhooks.create';

DROP VIEW ops.webhook_secrets_unsealed;

DROP VIEW ops.sealing_keys;

DROP TRIGGER webhooks_plaintext_refused ON compute.webhooks;

DROP FUNCTION compute.webhook_due(bigint,bigint,integer);

DROP FUNCTION worker_api.webhook_due(bigint,bigint,integer);

SET LOCAL check_function_bodies = off;

DROP FUNCTION api.sealing_key();

DROP FUNCTION compute.iam_attributes(api.methods,jsonb);

DROP FUNCTION compute.sealed_secret_parse(text);

DROP FUNCTION worker_api.sealing_key_register(text,bytea);

DROP FUNCTION worker_api.webhook_secret_resealed(uuid,text,text,bytea);

DROP FUNCTION worker_api.webhook_secrets_to_reseal(text,text[],integer);

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
        SELECT compute.resource_json(a.tenant_id, m.parent_type, a.parent_id, a.attributes || '{"provisional": true}')
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

COMMENT ON FUNCTION api.resolve(text,text) IS 'Better IAM''s resolveResource: tenant, parent and attributes of a resource, provisional ones included.';

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
    PERFORM compute.webhook_create(p_tenant_id, compute.input_text(p_input, 'url'), compute.input_text(p_input, 'secret'),
        ARRAY(SELECT pg_catalog.jsonb_array_elements_text(v_types)), p_resource_id::uuid);
    RETURN (SELECT compute.webhook_json(w) FROM compute.webhooks AS w WHERE w.webhook_id = p_resource_id::uuid);
END
$function$;

CREATE OR REPLACE FUNCTION compute.iam_request(p_tenant_id uuid, p_method api.methods, p_resource_id text, p_attributes jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT pg_catalog.jsonb_build_object('tenantId', p_tenant_id, 'action', p_method.action,
        'resource', pg_catalog.jsonb_build_object('type', p_method.resource_type, 'id', p_resource_id), 'attributes', p_attributes);
$function$;

COMMENT ON FUNCTION compute.iam_request(uuid,api.methods,text,jsonb) IS 'The IAM request of a method on a resource (Better IAM''s authorize body).';

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

DROP FUNCTION compute.webhook_create(uuid,text,text,text[],uuid);

CREATE OR REPLACE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_secret text, p_event_types text[] DEFAULT '{}'::text[], p_webhook_id uuid DEFAULT NULL::uuid)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_webhook_id uuid := coalesce(p_webhook_id, pg_catalog.gen_random_uuid());
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF NOT coalesce(compute.webhook_url_valid(p_url), false) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid webhook URL %L', pg_catalog.left(p_url, 200)),
            'Pass an http(s) URL of at most 2000 characters whose host is a DNS name, an IPv4 address or a bracketed IPv6 address, with an optional port 1-65535 and no user:password@.');
    END IF;
    IF p_secret IS NULL OR length(p_secret) NOT BETWEEN 16 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a webhook secret has 16 to 200 characters', 'Use a long random secret.');
    END IF;
    IF (SELECT count(*) FROM compute.webhooks AS w WHERE w.tenant_id = p_tenant_id AND w.active) >= compute.limit('webhooks_per_tenant') THEN
        PERFORM compute.raise_error('QUOTA_EXCEEDED', 'this tenant has as many webhooks as it may',
            pg_catalog.format('Delete one first (limit webhooks_per_tenant = %s).', compute.limit('webhooks_per_tenant')));
    END IF;
    INSERT INTO compute.webhooks (webhook_id, tenant_id, url, secret, event_types, created_at)
    VALUES (v_webhook_id, p_tenant_id, p_url, p_secret, coalesce(p_event_types, '{}'), compute.compute_now());
    RETURN v_webhook_id;
END
$function$;

COMMENT ON FUNCTION compute.webhook_create(uuid,text,text,text[],uuid) IS 'Subscribe a tenant''s URL to its events.';

COMMENT ON TABLE compute.sealing_keys IS NULL;

COMMENT ON TABLE compute.webhooks IS 'A tenant''s subscription: URL, signing secret, event types (globs like reservation.*; empty = all).';

COMMENT ON COLUMN compute.webhooks.secret IS NULL;

COMMENT ON COLUMN compute.webhooks.secret_sealed IS NULL;

DROP TYPE compute.webhook_delivery;

CREATE TYPE compute.webhook_delivery AS (delivery_id uuid, event_id bigint, event_type text, url text, secret text,
                                         attempts integer, body jsonb);

ALTER TABLE compute.webhooks
    DROP CONSTRAINT webhooks_secret_one_form,
    DROP COLUMN secret_sealed,
    DROP COLUMN secret_key_id,
    ALTER COLUMN secret SET NOT NULL;

DROP TABLE compute.sealing_keys;

DROP FUNCTION compute.webhook_plaintext_refused();

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
 RETURNS SETOF compute.webhook_delivery
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_work compute.work := compute.work_fenced(p_work_id, p_epoch);
BEGIN
    RETURN QUERY
    SELECT d.delivery_id, o.event_id, o.event_type, w.url, w.secret, d.attempts,
           pg_catalog.jsonb_build_object('id', o.event_id, 'type', o.event_type, 'tenant_id', o.tenant_id,
                                         'aggregate', pg_catalog.jsonb_build_object('type', o.aggregate_type, 'id', o.aggregate_id,
                                                                                    'seq', o.aggregate_seq),
                                         'occurred_at', o.occurred_at, 'data', o.payload)
      FROM compute.webhook_deliveries AS d
      JOIN compute.webhooks AS w ON w.webhook_id = d.webhook_id
      JOIN compute.outbox AS o ON o.event_id = d.event_id
     WHERE d.webhook_id = v_work.key::uuid AND d.state = 'pending' AND d.next_attempt_at <= compute.compute_now()
     ORDER BY d.next_attempt_at, d.event_id
     LIMIT least(coalesce(p_limit, compute.limit('webhook_delivery_batch')), compute.limit('webhook_delivery_batch'));
END
$function$;

COMMENT ON FUNCTION compute.webhook_due(bigint,bigint,integer) IS 'Deliveries due now for the webhook a webhook.deliver item is about; FENCED with a stale epoch.';

CREATE OR REPLACE FUNCTION worker_api.webhook_due(p_work_id bigint, p_epoch bigint, p_limit integer)
 RETURNS SETOF compute.webhook_delivery
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$ SELECT * FROM compute.webhook_due(p_work_id, p_epoch, p_limit) $function$;

GRANT EXECUTE ON FUNCTION worker_api.webhook_due(bigint,bigint,integer) TO bc_worker;

COMMIT;
