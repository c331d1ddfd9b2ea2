-- Verify better_compute:webhook_url_document_pattern on pg

BEGIN;

SELECT 1 / (SELECT ('http://host.example:8080/hook' ~ (m.input_schema #>> '{properties,url,pattern}'))
                   AND NOT ('http://user@host/' ~ (m.input_schema #>> '{properties,url,pattern}'))
              FROM api.methods AS m WHERE m.method = 'webhooks.create')::integer;

ROLLBACK;
