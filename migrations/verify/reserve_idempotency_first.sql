-- Verify better_compute:reserve_idempotency_first on pg

BEGIN;

-- The key is checked with the request's other fields, before the pool is looked up.
DO $$
BEGIN
    PERFORM compute.reserve(pg_catalog.jsonb_build_object('tenant_id', pg_catalog.gen_random_uuid(), 'pool_id', pg_catalog.gen_random_uuid(),
        'shape', 'gpu', 'end', '2030-01-01T00:00:00Z', 'idempotency_key', ''));
    PERFORM compute.raise_error('INVALID_ARGUMENT', 'compute.reserve took an empty idempotency key', 'Deploy reserve_idempotency_first.');
EXCEPTION WHEN SQLSTATE 'BC400' THEN
    NULL;
END
$$;
SELECT compute.reservation_replay(pg_catalog.gen_random_uuid(), 'no-such-key', '') IS NULL;

ROLLBACK;
