-- The database checks an input against its method's whole input_schema, not only unknown and
-- required fields: ops.call skips the relay's JSON Schema check, and a field no function reads
-- (nodes.uncordon's reason) was not checked at all. A null field counts as absent.
BEGIN;
SELECT plan(26);

-- One rule at a time (compute.input_value_problem): NULL when the value conforms.
SELECT is(compute.input_value_problem(r::jsonb, v::jsonb), problem, description)
  FROM (VALUES
    ('{"type":"string","minLength":1,"maxLength":3}', '"abc"', NULL, 'a string within its lengths'),
    ('{"type":"string","minLength":1,"maxLength":3}', '"abcd"', 'is longer than its maxLength 3 (4 characters)', 'too long'),
    ('{"type":"string","minLength":1,"maxLength":3}', '""', 'is shorter than its minLength 1', 'too short'),
    ('{"type":"string","maxLength":3}', '"äöü"', NULL, 'lengths count characters, not bytes'),
    ('{"type":"string","pattern":"^[a-z]+$"}', '"Ab"', 'does not match its pattern ^[a-z]+$: Ab', 'a pattern'),
    ('{"type":"string","enum":["pack","spread"]}', '"fill"', 'is not one of its enum ["pack", "spread"]', 'an enum'),
    ('{"type":"string","enum":["pack","spread"]}', '"pack"', NULL, 'a value of the enum'),
    ('{"type":"integer","minimum":1,"maximum":1000}', '1000.0', NULL, 'JSON Schema''s integer: 1000.0 is one'),
    ('{"type":"integer","minimum":1,"maximum":1000}', '1001', 'is above its maximum 1000', 'above the maximum'),
    ('{"type":"integer","minimum":1,"maximum":1000}', '0', 'is below its minimum 1', 'below the minimum'),
    ('{"type":"integer","minimum":1,"maximum":1000}', '1.5', 'is not a valid integer: 1.5', 'a fraction is no integer'),
    ('{"type":"integer","minimum":1,"maximum":1000}', '"5"', 'is not a valid integer: "5"', 'a string is no integer'),
    ('{"type":"number","minimum":0,"maximum":1e12}', '1e5000', 'is above its maximum 1000000000000', 'a number of 5,000 digits'),
    ('{"type":"array","maxItems":2,"items":{"type":"string","minLength":1}}', '["a","b","c"]', 'has 3 items, more than its maxItems 2', 'too many items'),
    ('{"type":"array","maxItems":2,"items":{"type":"string","minLength":1}}', '["a",""]', '[1] is shorter than its minLength 1', 'each item is checked'),
    ('{"type":"array","maxItems":2,"items":{"type":"string","minLength":1}}', '["a",5]', '[1] is not a valid string: 5', 'an item of the wrong type'),
    ('{"type":"object","maxProperties":1}', '{"a":1,"b":2}', 'has 2 fields, more than its maxProperties 1', 'too many fields'),
    ('{"type":"boolean"}', '"true"', 'is not a valid boolean: "true"', 'a string is no boolean'),
    ('{}', '{"any":["thing"]}', NULL, 'no rule, no problem')
  ) AS t(r, v, problem, description);

-- Through ops.call (break-glass: no relay, no IAM), where nothing else checks the document.
SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT min(node_id::text) AS node, pgtap_fixtures.tenant('A') AS tenant FROM compute.nodes WHERE pool_id = :'pool' \gset
SELECT throws_ok(format($$SELECT ops.call('nodes.uncordon', '{"tenant_id": "%s", "node_id": "%s", "reason": "%s"}', 'INC-1')$$,
                        :'tenant', :'node', repeat('x', 5000)),
                 'BC400', 'reason is longer than its maxLength 1000 (5000 characters)', 'a field no function reads is still checked');
SELECT throws_ok(format($$SELECT ops.call('capacity.earliest', '{"tenant_id": "%s", "pool_id": "%s", "shape": "gpu", "count": 999999999, "duration_seconds": 60}', 'INC-1')$$,
                        :'tenant', :'pool'),
                 'BC400', 'count is above its maximum 100000', 'a bound of the document');
SELECT throws_ok(format($$SELECT ops.call('webhooks.create', '{"tenant_id": "%s", "url": "https://example.com/h", "sealed_secret": "%s", "event_types": ["reservation.*", ""]}', 'INC-1')$$,
                        :'tenant', pgtap_fixtures.sealed_secret()),
                 'BC400', 'event_types [1] is shorter than its minLength 1', 'an item of a list');
SELECT throws_ok(format($$SELECT ops.call('capacity.free', '{"tenant_id": "%s", "pool_id": "%s", "shape": "GPU", "end": "2030-01-01T00:00:00Z"}', 'INC-1')$$,
                        :'tenant', :'pool'),
                 'BC400', NULL, 'a shape that does not match the pattern');
SELECT is(ops.call('capacity.earliest', jsonb_build_object('tenant_id', :'tenant', 'pool_id', :'pool', 'shape', 'gpu', 'count', 1,
                                                           'duration_seconds', 60, 'not_before', NULL), 'INC-1') ->> 'reason',
          NULL, 'a null field counts as absent');
SELECT is(pgtap_fixtures.refusal(format($$SELECT ops.call('nodes.cordon', '{"tenant_id": "%s", "node_id": "%s", "reason": "disk"}', 'INC-1%s')$$,
                                        :'tenant', :'node', repeat(' ', 100000))),
          'BC400: Say why you bypass IAM (1-1000 characters): it is audited.', 'a break-glass reason is bounded before it is trimmed');
SELECT is(pgtap_fixtures.refusal(format($$SELECT ops.call('nodes.uncordon', '{"tenant_id": "%s", "node_id": "%s", "reason": 5}', 'INC-1')$$,
                                        :'tenant', :'node')),
          'BC400: The method''s input_schema says what each field takes: SELECT input_schema FROM api.catalog() (or the OpenAPI document).',
          'the hint says where the rules are');

SELECT * FROM finish();
ROLLBACK;
