-- The signer hands a certificate back (worker_api.svid_issued) and the database decides again:
-- the certificate must be of the active CA; the node must not be quarantined; a renewal must be
-- signed by the node's registered key, name its node, session epoch and key, and its session must
-- still be current. What it refuses is recorded with the reason and never reaches the gateway.
BEGIN;
SELECT plan(8);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 0, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool')) -> 'data' AS minted \gset
SELECT sha256(convert_to(:'minted'::jsonb ->> 'token', 'UTF8')) AS hashed,
       '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004'::bytea || decode(repeat('ab', 64), 'hex') AS node_key \gset
SELECT node_api.join_request(sha256(:'hashed'::bytea), compute.hmac_sha256(:'hashed'::bytea, convert_to(E'bc-v1\njoin\n', 'UTF8') || :'node_key'::bytea),
                             pgtap_fixtures.inventory('gpu-node-01'), :'node_key'::bytea, 'csr', 'gw-1') AS joined \gset
SELECT (:'joined'::jsonb ->> 'node_id')::uuid AS node, (:'joined'::jsonb ->> 'request_id')::uuid AS join_request \gset
SELECT is(worker_api.node_ca_publish('CA one', sha256('one')), 'active', 'the first CA published is the active one');
SELECT is(worker_api.node_ca_publish('CA two', sha256('two')), 'trusted', 'a later one is only trusted');

SELECT is(worker_api.svid_issued(:'join_request', NULL, 'PEM', sha256('two')), 'refused', 'a certificate of a CA that is not active is refused');
SELECT is((SELECT reason FROM ops.svid_requests WHERE request_id = :'join_request'), 'the certificate is not from the active node CA',
          'with the reason, for operators');
SELECT is(node_api.certificate_get(:'join_request') ->> 'certificate', NULL, 'and the gateway gets no certificate');

SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset
SELECT node_api.renew_request(:'node', :'epoch', 'gw-1', 'csr', :'node_key'::bytea,
           jsonb_build_object('body', jsonb_build_object('node_id', :'node', 'epoch', :'epoch' + 1,
                                                         'public_key_sha256', encode(sha256(:'node_key'::bytea), 'hex')))) AS renewal \gset
SELECT is(worker_api.svid_issued(:'renewal', :'node_key'::bytea, 'PEM', sha256('one')), 'refused',
          'a renewal signed for another session is refused');

SELECT node_api.renew_request(:'node', :'epoch', 'gw-1', 'csr', :'node_key'::bytea,
           jsonb_build_object('body', jsonb_build_object('node_id', :'node', 'epoch', :'epoch',
                                                         'public_key_sha256', encode(sha256(:'node_key'::bytea), 'hex')))) AS renewal \gset
SELECT compute.node_flag_set(:'node', 'quarantined', 'test', 'remediation gave up');
SELECT is(worker_api.svid_issued(:'renewal', :'node_key'::bytea, 'PEM', sha256('one')), 'refused',
          'a node quarantined since it asked gets nothing');
SELECT is((SELECT reason FROM ops.svid_requests WHERE request_id = :'renewal'), 'the node is quarantined', 'and says why');

SELECT * FROM finish();
ROLLBACK;
