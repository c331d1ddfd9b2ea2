-- Verify better_compute:api_schema_pieces on pg

BEGIN;

-- The idempotency key's schema is written once, and every method's schema reads resolved.
SELECT 1 / (count(*) = 1)::integer FROM compute.api_schema_pieces WHERE name = 'idempotency_key';
SELECT 1 / (count(*) = 0)::integer FROM api.catalog() WHERE input_schema::text LIKE '%$piece%';
-- A raised limit is the bound the catalog answers and the one input_check holds an input to.
UPDATE compute.limits SET value = 100 WHERE name = 'atoms_per_reservation';
SELECT 1 / ((input_schema #>> '{properties,count,maximum}')::integer = 100)::integer
  FROM api.catalog() WHERE method = 'reservations.create';
SELECT compute.input_check((SELECT input_schema FROM api.methods WHERE method = 'reservations.create'),
    '{"pool_id": "00000000-0000-0000-0000-000000000001", "shape": "gpu", "count": 65, "end": "2030-01-01T00:00:00Z"}');

ROLLBACK;
