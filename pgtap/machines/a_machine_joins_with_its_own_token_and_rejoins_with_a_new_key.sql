-- Provisioning ends in a normal node: the token the agent put in the image joins (join_request:
-- token_ref and a proof bound to the node's key, the signer's decision after) only with the
-- machine's system uuid; then active, bookable. Release: cleaning revokes the node's key and
-- cordons it: the old key can no longer retry its join, and its certificate (valid until it
-- expires) opens no session; clean, it is deployed again and
-- rejoins with a new token and a new key.
BEGIN;
SELECT plan(17);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT system_uuid AS sysuuid FROM compute.machines WHERE machine_id = :'machine' \gset
SELECT sha256(convert_to('bcjt_first', 'UTF8')) AS first, sha256(convert_to('bcjt_second', 'UTF8')) AS second,
       '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('ab', 64), 'hex') AS old_key,
       '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('cd', 64), 'hex') AS new_key \gset
SELECT compute.hmac_sha256(:'first'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'old_key'::bytea) AS old_proof,
       compute.hmac_sha256(:'second'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'new_key'::bytea) AS new_proof \gset
SELECT worker_api.node_ca_publish('CA one', sha256('one'));

SELECT ops.machine_manage('bm-1');
SELECT is(pgtap_fixtures.machine_run(:'machine'), 'manageable', 'verified: manageable');
SELECT ops.machine_provide('bm-1');
SELECT is(pgtap_fixtures.machine_run(:'machine', 'bcjt_first'), 'deploy_wait', 'deployed: waits for its node');
SELECT throws_ok(format('SELECT node_api.join_request(%L, %L, pgtap_fixtures.inventory(''bm-1'', 2), %L, ''csr'', ''gw-1'')',
                        sha256(:'first'::bytea), :'old_proof'::bytea, :'old_key'::bytea),
                 'BC403', 'the join token is not valid', 'the machine''s token without its system uuid is refused');
SELECT throws_ok(format('SELECT node_api.join_request(%L, %L, pgtap_fixtures.inventory(''bm-1'', 2) || %L, %L, ''csr'', ''gw-1'')',
                        sha256(:'first'::bytea), :'old_proof'::bytea,
                        jsonb_build_object('system_uuid', '00000000-0000-0000-0000-00000000beef'), :'old_key'::bytea),
                 'BC403', 'the join token is not valid', 'the machine''s token with another system uuid is refused');
SELECT is((SELECT t.state FROM compute.join_tokens AS t WHERE sha256(t.token_sha256) = sha256(:'first'::bytea)), 'active',
          'and the token is not spent');
SELECT node_api.join_request(sha256(:'first'::bytea), :'old_proof'::bytea,
                             pgtap_fixtures.inventory('bm-1', 2) || jsonb_build_object('system_uuid', :'sysuuid'),
                             :'old_key'::bytea, 'csr', 'gw-1') AS joined \gset
SELECT (:'joined'::jsonb ->> 'node_id')::uuid AS node \gset
SELECT is((SELECT state || ' ' || (node_id = :'node'::uuid) FROM compute.machines WHERE machine_id = :'machine'), 'active true',
          'joined with its system uuid: active, with its node');
SELECT is(worker_api.svid_issued((:'joined'::jsonb ->> 'request_id')::uuid, NULL, 'PEM', sha256('one')), 'issued',
          'the signer''s certificate for it is authorised');
SELECT is((SELECT count(*) FROM compute.atoms WHERE node_id = :'node'), 2::bigint, 'its GPUs are bookable');

SELECT ops.machine_release('bm-1');
SELECT is((SELECT count(*) FROM compute.node_identities WHERE node_id = :'node'), 0::bigint, 'cleaning revokes the old key at once');
SELECT throws_ok(format('SELECT node_api.join_request(%L, %L, pgtap_fixtures.inventory(''bm-1'', 2) || %L, %L, ''csr'', ''gw-1'')',
                        sha256(:'first'::bytea), :'old_proof'::bytea, jsonb_build_object('system_uuid', :'sysuuid'), :'old_key'::bytea),
                 'BC403', 'the join token is not valid', 'the old key cannot retry its join for a new certificate');
SELECT throws_ok(format('SELECT node_api.session_open(%L, ''gw-1'', %L)', :'node', :'old_key'::bytea), 'BC403',
                 format('the certificate''s key is not the registered key of node %s', :'node'),
                 'and its certificate, still unexpired, opens no session');
SELECT is(pgtap_fixtures.machine_run(:'machine', 'bcjt_second'), 'deploy_wait', 'cleaned, available, deployed again');
SELECT node_api.join_request(sha256(:'second'::bytea), :'new_proof'::bytea,
                             pgtap_fixtures.inventory('bm-1', 2) || jsonb_build_object('system_uuid', :'sysuuid'),
                             :'new_key'::bytea, 'csr', 'gw-1') AS rejoined \gset
SELECT is((SELECT public_key FROM compute.node_identities WHERE node_id = :'node'), :'new_key'::bytea,
          'the rejoin registers the new key for the same node');
SELECT is(worker_api.svid_issued((:'rejoined'::jsonb ->> 'request_id')::uuid, NULL, 'PEM', sha256('one')), 'issued',
          'and its certificate is authorised');
SELECT ok(node_api.session_open(:'node', 'gw-1', :'new_key'::bytea) > 0, 'the new key''s certificate opens a session');
SELECT throws_ok(format('SELECT node_api.session_open(%L, ''gw-1'', %L)', :'node', :'old_key'::bytea), 'BC403',
                 format('the certificate''s key is not the registered key of node %s', :'node'),
                 'the old one still none');
SELECT is((SELECT state || ' ' || NOT EXISTS (SELECT 1 FROM compute.node_flags WHERE node_id = :'node')
             FROM compute.machines WHERE machine_id = :'machine'), 'active true', 'active again, no flag left');

SELECT * FROM finish();
ROLLBACK;
