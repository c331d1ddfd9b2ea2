-- Tenant isolation: every catalog method that names a resource or a parent, called by tenant B
-- with tenant A's ids, is NOT_FOUND before IAM is asked, whatever the method. Lists of B show
-- nothing of A.
BEGIN;
SELECT plan(2 + (SELECT count(*)::integer FROM api.methods WHERE resource_key IS NOT NULL OR parent_key IS NOT NULL));

-- Tenant A owns one of everything.
SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT compute.offering_create(:'pool', 'gpu', 8, interval '30 days', 'vps') AS vps_offering \gset
UPDATE compute.offerings SET vcpus_per_atom = 8, memory_mib_per_atom = 65536 WHERE offering_id = :'vps_offering';
CREATE TEMP TABLE a_ids (field text PRIMARY KEY, id text);
INSERT INTO a_ids
SELECT 'pool_id', :'pool' UNION ALL
SELECT 'site_id', site_id::text FROM compute.pools WHERE pool_id = :'pool' UNION ALL
SELECT 'node_id', min(node_id::text) FROM compute.nodes WHERE pool_id = :'pool' UNION ALL
SELECT 'reservation_id', pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', now() + interval '1 hour')) #>> '{data,reservation_id}' UNION ALL
SELECT 'instance_id', pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 1))
    #>> '{data,instance_id}' UNION ALL
SELECT 'token_id', pgtap_fixtures.api('joinTokens.create', pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool')) #>> '{data,token_id}' UNION ALL
SELECT 'webhook_id', pgtap_fixtures.api('webhooks.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('url', 'https://a.example/hook', 'sealed_secret', pgtap_fixtures.sealed_secret())) #>> '{data,webhook_id}';
INSERT INTO a_ids SELECT 'event_id', max(event_id)::text FROM compute.audit_events WHERE tenant_id = pgtap_fixtures.tenant('A');
INSERT INTO a_ids SELECT 'machine_id', pgtap_fixtures.machine(:'pool', 'bm-a')::text;
INSERT INTO a_ids SELECT 'agent_id', agent_id::text FROM compute.machines WHERE name = 'bm-a';

-- A full input for each method, every id field filled with A's.
CREATE TEMP TABLE probes AS
SELECT m.method,
       (SELECT jsonb_object_agg(f.key, CASE WHEN f.key = 'event_id' THEN to_jsonb(i.id::bigint) ELSE to_jsonb(i.id) END)
          FROM jsonb_object_keys(m.input_schema -> 'properties') AS f(key) JOIN a_ids AS i ON i.field = f.key)
       || jsonb_build_object('reason', 'probe', 'shape', 'gpu', 'count', 1, 'end', now() + interval '2 hours', 'name', 'probe', 'gpu_model', 'NVIDIA H200',
                             'placement_policy', 'spread', 'max_count', 1, 'max_duration_seconds', 60, 'duration_seconds', 60,
                             'kind', 'reboot', 'gpus', 1, 'image', 'probe.raw', 'ssh_keys', jsonb_build_array('ssh-ed25519 AAAA probe'))
       || jsonb_build_object('public_key', encode(sha256('probe'), 'base64'), 'bmc_address', 'https://10.0.0.9',
                             'system_uuid', md5('probe')::uuid, 'image_url', 'https://images.example/bcd.iso',
                             'credentials_key_id', '0123456789abcdef', 'credentials_box', replace(encode(sha512('probe') || sha512('box'), 'base64'), E'\n', ''))
       AS input
  FROM api.methods AS m WHERE m.resource_key IS NOT NULL OR m.parent_key IS NOT NULL;

SELECT throws_ok(format('SELECT api.prepare(%L, %L, %L::jsonb - ARRAY(SELECT k FROM jsonb_object_keys(%L::jsonb) AS k
                                                                         WHERE NOT %L::jsonb ? k))',
                        p.method, pgtap_fixtures.tenant('B'), p.input, p.input, m.input_schema -> 'properties'),
                 'BC404', NULL, p.method || ' with tenant A''s ids is NOT_FOUND for tenant B')
  FROM probes AS p JOIN api.methods AS m USING (method) ORDER BY p.method;

SELECT is((SELECT count(*) FROM api.methods AS m
            WHERE m.kind = 'read' AND m.method LIKE '%.list' AND m.input_schema -> 'required' = '[]'
              AND pgtap_fixtures.api(m.method, pgtap_fixtures.tenant('B'), '{}') -> 'data' NOT IN ('[]', '{"next": null, "events": []}')),
          0::bigint, 'every list of tenant B is empty');
SELECT is(pgtap_fixtures.api('capacity.rollup', pgtap_fixtures.tenant('B'), '{}') -> 'data', '[]', 'B''s rollup shows none of A''s pools');

SELECT * FROM finish();
ROLLBACK;
