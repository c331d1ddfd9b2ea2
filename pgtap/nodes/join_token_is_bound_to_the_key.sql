-- A gateway relays a join without learning the token: the node sends sha256(sha256(token)) and an
-- HMAC, keyed by sha256(token), over its public key. The same proof with another key (a gateway's
-- own) is refused like any invalid token, and leaves the token unspent for the node; the proper
-- one adopts the node and records the SVID request: who relayed it, for which node, which token.
-- The key that spent a token may join again with it (a retry when no signer answered): the same
-- node, a new request; any other key is refused.
BEGIN;
SELECT plan(7);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 0, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool')) -> 'data' AS minted \gset
SELECT sha256(convert_to(:'minted'::jsonb ->> 'token', 'UTF8')) AS hashed,
       '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('ab', 64), 'hex') AS node_key,
       '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('cd', 64), 'hex') AS gateway_key \gset
SELECT compute.hmac_sha256(:'hashed'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'node_key'::bytea) AS proof \gset

SELECT throws_ok(format('SELECT node_api.join_request(%L, %L, pgtap_fixtures.inventory(''gw-own''), %L, ''csr'', ''gw-1'')',
                        sha256(:'hashed'::bytea), :'proof'::bytea, :'gateway_key'::bytea),
                 'BC403', 'the join token is not valid', 'the node''s proof with another key is refused');
SELECT is((SELECT state FROM compute.join_tokens WHERE token_id = (:'minted'::jsonb ->> 'token_id')::uuid), 'active',
          'and the token is not spent');
SELECT node_api.join_request(sha256(:'hashed'::bytea), :'proof'::bytea, pgtap_fixtures.inventory('gpu-node-01'),
                             :'node_key'::bytea, 'csr', 'gw-1') AS joined \gset
SELECT is((SELECT public_key FROM compute.node_identities WHERE node_id = (:'joined'::jsonb ->> 'node_id')::uuid), :'node_key'::bytea,
          'the node joins with its own key');
SELECT results_eq(format($$SELECT kind, gateway, node_id, token_id, state FROM compute.svid_requests WHERE request_id = %L$$,
                         :'joined'::jsonb ->> 'request_id'),
                  format($$VALUES ('join', 'gw-1', %L::uuid, %L::uuid, 'pending')$$, :'joined'::jsonb ->> 'node_id',
                         :'minted'::jsonb ->> 'token_id'),
                  'the SVID request records the relaying gateway, the node and the token');
SELECT throws_ok(format('SELECT node_api.join_request(%L, %L, pgtap_fixtures.inventory(''gpu-node-02''), %L, ''csr'', ''gw-1'')',
                        sha256(:'hashed'::bytea),
                        compute.hmac_sha256(:'hashed'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'gateway_key'::bytea),
                        :'gateway_key'::bytea),
                 'BC403', 'the join token is not valid', 'a used token is refused to another key, even with its own proof');
SELECT is((node_api.join_request(sha256(:'hashed'::bytea), :'proof'::bytea, pgtap_fixtures.inventory('gpu-node-01'),
                                 :'node_key'::bytea, 'csr', 'gw-2') ->> 'node_id')::uuid,
          (:'joined'::jsonb ->> 'node_id')::uuid,
          'the key that spent it may retry (its request went unanswered): the same node, a new request');
SELECT throws_ok(format('SELECT node_api.join(%L, pgtap_fixtures.inventory(''gpu-node-03''), %L)',
                        :'minted'::jsonb ->> 'token', :'node_key'::bytea),
                 'BC501', NULL, 'the raw-token join of older gateways is UNSUPPORTED');

SELECT * FROM finish();
ROLLBACK;
