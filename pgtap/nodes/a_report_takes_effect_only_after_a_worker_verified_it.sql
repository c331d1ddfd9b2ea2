-- Relays cannot forge (P14): node_api.report only appends a node's envelope to its inbox and pokes
-- the worker; the report takes effect when a worker hands it back as verified with the node's
-- registered key, once, in (epoch, seq) order: a replay, a report signed in another session, one
-- naming another node and one the signature of which did not verify are rejected, recorded and
-- announced (node.report_rejected), never applied.
BEGIN;
SELECT plan(16);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 2, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT node_id AS node FROM compute.nodes WHERE pool_id = :'pool' ORDER BY name LIMIT 1 \gset
SELECT node_id AS unjoined FROM compute.nodes WHERE pool_id = :'pool' ORDER BY name OFFSET 1 LIMIT 1 \gset
INSERT INTO compute.node_identities (node_id, public_key, token_id, joined_at)
SELECT :'node', '\x3059301306072a8648ce3d020106082a8648ce3d03010703420004aaaa'::bytea || decode(repeat('ab', 63), 'hex'),
       (compute.api_join_tokens_create(NULL, gen_random_uuid()::text, jsonb_build_object('pool_id', :'pool')) ->> 'token_id')::uuid,
       compute.compute_now();
SELECT public_key AS key FROM compute.node_identities WHERE node_id = :'node' \gset
UPDATE compute.node_specs SET signed_generation = generation, envelope = '{}' WHERE node_id = :'node';
SELECT generation AS generation FROM compute.node_specs WHERE node_id = :'node' \gset
SELECT pgtap_fixtures.session_open(:'node', 'gw-1') AS epoch \gset

CREATE TEMP TABLE body AS
SELECT jsonb_build_object('node_id', :'node', 'epoch', :epoch, 'seq', 1, 'generation', :generation,
                          'conditions', '[{"type": "Ready"}]'::jsonb) AS b;
SELECT node_api.report(:'node', :epoch, jsonb_build_object('v', 1, 'purpose', 'node.observed', 'body', b, 'sig', 'c2ln'))
       AS first FROM body \gset

SELECT is((SELECT observed_generation FROM compute.node_specs WHERE node_id = :'node'), NULL, 'appending a report changes nothing');
SELECT is((SELECT priority FROM compute.work WHERE kind = 'node.reports' AND key = :'node' AND state = 'pending'), 1,
          'it pokes the worker, an acknowledgement ahead of other work');
SELECT is((SELECT public_key FROM worker_api.node_reports_pending(:'node', 10)), :'key'::bytea,
          'the worker reads it with the node''s registered key');
SELECT throws_ok(format('SELECT worker_api.node_report_verified(%s, %L)', :first, '\x00'), 'BC412', NULL,
                 'a report verified with another key is not applied');
SELECT node_api.report(:'node', :epoch, '{"v": 1, "purpose": "node.result", "body": {}, "sig": "x"}') AS second \gset
SELECT throws_ok(format('SELECT worker_api.node_report_verified(%s, %L)', :second, :'key'), 'BC412', NULL,
                 'nor one while an earlier report of the node is pending');
SELECT worker_api.node_report_rejected(:second, 'the signature of the node.result envelope does not verify');
SELECT ok(worker_api.node_report_verified(:first, :'key'), 'verified, it is applied');
SELECT is((SELECT observed_generation FROM compute.node_specs WHERE node_id = :'node'), :generation::bigint, 'the spec is acknowledged');

SELECT node_api.report(:'node', :epoch, jsonb_build_object('v', 1, 'purpose', 'node.observed', 'body', b, 'sig', 'c2ln'))
       AS replay FROM body \gset
SELECT ok(NOT worker_api.node_report_verified(:replay, :'key'), 'the same report again is rejected');
SELECT matches((SELECT reason FROM compute.node_reports WHERE report_id = :replay), '^replayed', 'as a replay');

SELECT node_api.report(:'node', :epoch, jsonb_build_object('v', 1, 'purpose', 'node.observed',
           'body', b || jsonb_build_object('seq', 2, 'epoch', :epoch - 1), 'sig', 'c2ln')) AS stale FROM body \gset
SELECT ok(NOT worker_api.node_report_verified(:stale, :'key'), 'a report signed in another session is rejected');
SELECT node_api.report(:'node', :epoch, jsonb_build_object('v', 1, 'purpose', 'node.observed',
           'body', b || jsonb_build_object('seq', 3, 'node_id', gen_random_uuid()), 'sig', 'c2ln')) AS other FROM body \gset
SELECT ok(NOT worker_api.node_report_verified(:other, :'key'), 'a report naming another node is rejected');

SELECT node_api.report(:'node', :epoch, '{"v": 1, "purpose": "node.inventory", "body": {}, "sig": "x"}') AS forged \gset
SELECT worker_api.node_report_rejected(:forged, 'the signature of the node.inventory envelope does not verify');
SELECT is((SELECT array_agg(report_id ORDER BY report_id) FROM ops.node_reports_rejected WHERE node_id = :'node'),
          ARRAY[:second, :replay, :stale, :other, :forged]::bigint[], 'operators see every rejected report');
SELECT is((SELECT count(*) FROM compute.outbox WHERE aggregate_id = :'node' AND event_type = 'node.report_rejected'
              AND tenant_id = pgtap_fixtures.tenant('A')), 5::bigint, 'each is an event of the node''s site tenant');
SELECT is(worker_api.node_report_verified(:forged, :'key'), NULL, 'a decided report cannot be applied later');

SELECT throws_ok(format('SELECT node_api.session_open(%L, ''gw-1'', %L)', :'unjoined', :'key'::bytea), 'BC403',
                 format('the certificate''s key is not the registered key of node %s', :'unjoined'),
                 'a node that never joined has no key, so no session to report in');

UPDATE compute.limits SET value = 1 WHERE name = 'node_reports_pending_per_node';
SELECT node_api.report(:'node', :epoch, '{"purpose": "node.result"}');
SELECT throws_ok(format('SELECT node_api.report(%L, %s, %L)', :'node', :epoch, '{"purpose": "node.result"}'), 'BC429', NULL,
                 'reports waiting for a worker are bounded per node');

SELECT * FROM finish();
ROLLBACK;
