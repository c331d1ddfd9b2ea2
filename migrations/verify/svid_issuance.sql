-- Verify better_compute:svid_issuance on pg

BEGIN;

-- A gateway records requests and reads answers; only a signer (bc_worker) decides them.
SELECT 1 / (has_function_privilege('bc_gateway', 'node_api.join_request(bytea, bytea, jsonb, bytea, text, text)', 'EXECUTE')
            AND has_function_privilege('bc_gateway', 'node_api.renew_request(uuid, bigint, text, text, bytea, jsonb)', 'EXECUTE')
            AND NOT has_function_privilege('bc_gateway', 'worker_api.svid_issued(uuid, bytea, text, bytea)', 'EXECUTE')
            AND has_function_privilege('bc_worker', 'worker_api.svid_issued(uuid, bytea, text, bytea)', 'EXECUTE'))::integer;
-- RFC 4231 test case 2.
SELECT 1 / (compute.hmac_sha256(convert_to('Jefe', 'UTF8'), convert_to('what do ya want for nothing?', 'UTF8'))
            = decode('5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843', 'hex'))::integer;
-- The raw token no longer crosses a gateway.
DO $$
BEGIN
    PERFORM node_api.join('bcjt_x', '{}', '\x00');
    RAISE EXCEPTION 'node_api.join still takes a raw token' USING ERRCODE = 'BC400';
EXCEPTION WHEN SQLSTATE 'BC501' THEN NULL;
END
$$;
SELECT request_id, kind, gateway, node_id, token_id, session_epoch, state, reason FROM compute.svid_requests WHERE false;
SELECT ca_sha256, state FROM compute.node_cas WHERE false;
SELECT public_key, announced_at FROM compute.node_intent_keys WHERE false;

ROLLBACK;
