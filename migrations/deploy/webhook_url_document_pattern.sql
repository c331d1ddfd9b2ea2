-- Deploy better_compute:webhook_url_document_pattern to pg
-- The API document's pattern for a webhook URL follows compute.webhook_url_valid (a DNS name, IPv4 or
-- bracketed IPv6 host, an optional port, then a path): it allowed any non-space text after the
-- scheme, which the database then refused. What it still cannot say (a port up to 65535, a host of
-- at most 255 characters, an IPv6 literal that parses) the database checks.

BEGIN;

SET LOCAL ROLE bc_owner;

UPDATE api.methods
   SET input_schema = pg_catalog.jsonb_set(input_schema, '{properties,url,pattern}',
                                           '"^https?://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\\.?)(:[0-9]{1,5})?([/?#][^\\s]*)?$"')
 WHERE method = 'webhooks.create';

COMMIT;
