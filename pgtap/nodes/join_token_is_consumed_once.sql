-- A join token adopts one node into its pool, once: used, revoked, expired and unknown tokens are
-- all the same ACCESS_DENIED; the node's public key is kept. (The raw-token path, compute.node_join,
-- is what fixtures use; gateways join through node_api.join_request, join_token_is_bound_to_the_key.sql.)
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 0, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool')) -> 'data' AS minted \gset
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool', 'ttl_seconds', 60)) -> 'data' AS short \gset

SELECT compute.node_join(:'minted'::jsonb ->> 'token', pgtap_fixtures.inventory('gpu-node-01', 2), '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('ab', 64), 'hex')) AS joined \gset
SELECT is((SELECT pool_id FROM compute.nodes WHERE node_id = (:'joined'::jsonb ->> 'node_id')::uuid), :'pool'::uuid,
          'the node is adopted into the token''s pool');
SELECT is((SELECT count(*) FROM compute.atoms WHERE node_id = (:'joined'::jsonb ->> 'node_id')::uuid), 2::bigint, 'its GPUs are bookable atoms');
SELECT is((SELECT octet_length(public_key) FROM compute.node_identities), 91, 'its public key is kept');
SELECT throws_ok(format('SELECT compute.node_join(%L, pgtap_fixtures.inventory(''gpu-node-02''), ''\x00''::bytea || decode(repeat(''ab'', 40), ''hex''))',
                        :'minted'::jsonb ->> 'token'), 'BC403', 'the join token is not valid', 'a used token is refused');
SELECT compute.clock_advance(interval '61 seconds', true);
SELECT throws_ok(format('SELECT compute.node_join(%L, pgtap_fixtures.inventory(''gpu-node-03''), decode(repeat(''ab'', 40), ''hex''))',
                        :'short'::jsonb ->> 'token'), 'BC403', 'the join token is not valid', 'an expired token is refused the same way');
SELECT throws_ok($$SELECT compute.node_join('bcjt_guess', pgtap_fixtures.inventory('gpu-node-04'), decode(repeat('ab', 40), 'hex'))$$,
                 'BC403', 'the join token is not valid', 'an unknown token is refused the same way');

SELECT * FROM finish();
ROLLBACK;
