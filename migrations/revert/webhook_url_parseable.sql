-- Revert better_compute:webhook_url_parseable from pg

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE OR REPLACE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_secret text, p_event_types text[] DEFAULT '{}',
                                       p_webhook_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_webhook_id uuid := coalesce(p_webhook_id, pg_catalog.gen_random_uuid());
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF p_url IS NULL OR length(p_url) > 2000 OR p_url !~ '^https?://[^\s]+$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid webhook URL %L', pg_catalog.left(p_url, 200)),
            'Pass an http(s) URL of at most 2000 characters.');
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
$$;
COMMENT ON FUNCTION compute.webhook_create(uuid, text, text, text[], uuid) IS 'Subscribe a tenant''s URL to its events.';

ALTER TABLE compute.webhooks DROP CONSTRAINT webhooks_url_check;
ALTER TABLE compute.webhooks ADD CONSTRAINT webhooks_url_check CHECK (length(url) <= 2000 AND url ~ '^https?://[^\s]+$');

DROP FUNCTION compute.webhook_url_valid(text);

COMMIT;
