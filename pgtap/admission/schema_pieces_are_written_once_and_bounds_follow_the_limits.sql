-- The input schemas share named pieces (the idempotency key's schema is written once, in
-- compute.api_schema_pieces) and take a bound that copies a limit from compute.limits when they are
-- read: api.catalog() (the relay, the OpenAPI document, the CLI snapshot) and compute.input_check
-- (the database's own check) follow a raised limit. A marker naming nothing fails closed.
BEGIN;
SELECT plan(10);

SELECT is((SELECT count(*)::integer FROM compute.api_schema_pieces
            WHERE schema = '{"type":"string","minLength":1,"maxLength":200}'), 1,
          'the idempotency key''s schema is written once');
SELECT is((SELECT count(*)::integer FROM api.methods
            WHERE input_schema -> 'properties' -> 'idempotency_key' <> '{"$piece":"idempotency_key"}'), 0,
          'every method takes the idempotency key by its piece');
SELECT is((SELECT count(*)::integer FROM api.catalog() WHERE input_schema::text LIKE '%$piece%'), 0,
          'api.catalog() answers every piece resolved');
SELECT is((SELECT input_schema #>> '{properties,count,maximum}' FROM api.catalog() WHERE method = 'reservations.create'),
          '64', 'count is bounded by atoms_per_reservation');

UPDATE compute.limits SET value = 100 WHERE name = 'atoms_per_reservation';
UPDATE compute.limits SET value = 500 WHERE name = 'api_list_rows';
SELECT is((SELECT input_schema #>> '{properties,count,maximum}' FROM api.catalog() WHERE method = 'reservations.create'),
          '100', 'a raised atoms_per_reservation is the bound api.catalog() answers');
SELECT is((SELECT input_schema #>> '{properties,limit,maximum}' FROM api.catalog() WHERE method = 'sites.list'),
          '500', 'a piece''s bound follows its limit too (api_list_rows)');
SELECT lives_ok($$SELECT compute.input_check((SELECT input_schema FROM api.methods WHERE method = 'reservations.create'),
    '{"pool_id": "00000000-0000-4000-8000-000000000001", "shape": "gpu", "count": 100, "end": "2030-01-01T00:00:00Z"}')$$,
    'input_check accepts a count up to the raised limit');
SELECT throws_ok($$SELECT compute.input_check((SELECT input_schema FROM api.methods WHERE method = 'reservations.create'),
    '{"pool_id": "00000000-0000-4000-8000-000000000001", "shape": "gpu", "count": 101, "end": "2030-01-01T00:00:00Z"}')$$,
    'BC400', 'count is above its maximum 100', 'input_check refuses a count over it');
SELECT throws_ok($$SELECT compute.schema_resolve('{"type":"object","properties":{"x":{"$piece":"nope"}}}')$$,
    'BC404', 'no schema piece ''nope''', 'a marker naming no piece fails closed');
SELECT throws_ok($$SELECT compute.schema_resolve('{"type":"object","properties":{"x":{"type":"integer","x-limit":{"maximum":"nope"}}}}')$$,
    'BC404', 'no limit ''nope''', 'a bound naming no limit fails closed');

SELECT * FROM finish();
ROLLBACK;
