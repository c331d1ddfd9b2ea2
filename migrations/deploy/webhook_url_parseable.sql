-- Deploy better_compute:webhook_url_parseable to pg
-- A webhook URL must be one the sender can parse: the old rule (http(s), no spaces) let in URLs such
-- as 'http://[x' that urllib refuses with ValueError, so every delivery to them failed in the worker.
-- compute.webhook_url_valid is the rule now, in webhook_create and in the table's CHECK. Existing
-- subscriptions that break it stop the deploy with their ids: delete or correct them, then deploy.

BEGIN;

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

DO $$
DECLARE
    v_bad text;
BEGIN
    SELECT pg_catalog.string_agg(w.webhook_id::text, ', ' ORDER BY w.webhook_id) INTO v_bad
      FROM compute.webhooks AS w WHERE NOT compute.webhook_url_valid(w.url);
    IF v_bad IS NOT NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('webhooks with URLs the sender cannot parse: %s', v_bad),
            'Delete these webhooks (webhooks.delete) or UPDATE compute.webhooks SET url to a valid http(s) URL, then deploy again.');
    END IF;
END
$$;

ALTER TABLE compute.webhooks DROP CONSTRAINT webhooks_url_check;
ALTER TABLE compute.webhooks ADD CONSTRAINT webhooks_url_check CHECK (compute.webhook_url_valid(url));

CREATE OR REPLACE FUNCTION compute.webhook_create(p_tenant_id uuid, p_url text, p_secret text, p_event_types text[] DEFAULT '{}',
                                       p_webhook_id uuid DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
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
$$;
COMMENT ON FUNCTION compute.webhook_create(uuid, text, text, text[], uuid) IS 'Subscribe a tenant''s URL to its events.';

COMMIT;
