-- Verify better_compute:webhook_secrets_sealed on pg

BEGIN;

SELECT key_id, public_key, created_at FROM compute.sealing_keys WHERE false;
SELECT secret_key_id, secret_sealed FROM compute.webhooks WHERE false;

-- IAM never sees a webhook secret, sealed or not.
SELECT 1 / (NOT (compute.iam_request('00000000-0000-4000-8000-0000000000f1', m, 'x',
                                     '{"url": "https://example.com/h", "secret": "s", "sealed_secret": "t"}') -> 'attributes')
               ?| ARRAY['secret', 'sealed_secret'])::integer
  FROM api.methods AS m WHERE m.method = 'webhooks.create';

-- The database refuses a plaintext secret.
DO $$
BEGIN
    PERFORM compute.input_check(m.input_schema, '{"url": "https://example.com/h", "secret": "0123456789abcdef"}')
       FROM api.methods AS m WHERE m.method = 'webhooks.create';
    RAISE EXCEPTION 'a plaintext webhook secret was accepted';
EXCEPTION WHEN SQLSTATE 'BC400' THEN
    NULL;
END
$$;

ROLLBACK;
