-- A reservation request that is malformed or outside the offering's limits is INVALID_ARGUMENT
-- (NOT_FOUND for a pool or project that does not exist), naming the field; nothing is booked. A
-- start up to a minute in the past (clock skew) means now.
BEGIN;
SELECT plan(19);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
UPDATE compute.pools AS p SET name = 'pool-under-test' FROM t WHERE p.pool_id = t.pool;

SELECT throws_ok(format('SELECT compute.reserve(%L)',
                        pgtap_fixtures.request(t.pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00') || c.change),
                 c.sqlstate, c.message, c.description)
  FROM t, LATERAL (VALUES
    ('{"shape": "mig:2g.35gb"}'::jsonb, 'BC400', 'pool pool-under-test does not offer mig:2g.35gb', 'a shape the pool does not offer'),
    ('{"count": 65}', 'BC400', 'count 65 is out of range', 'more atoms than the offering allows'),
    ('{"count": 0}', 'BC400', 'count 0 is out of range', 'no atoms'),
    ('{"count": 1.5}', 'BC400', 'count is not a valid integer: 1.5', 'a fractional count'),
    ('{"end": "2030-01-31T01:00:01Z"}', 'BC400', 'a window of 30 days 00:00:01 is too long', 'a window one second longer than 30 days'),
    ('{"start": "2029-12-31T23:58:59Z"}', 'BC400', 'start 2029-12-31 23:58:59+00 is in the past', 'a start more than a minute ago'),
    ('{"end": "2030-01-01T00:30:00Z"}', 'BC400', 'end must come after start', 'an end before the start'),
    ('{"end": null}', 'BC400', 'end is required', 'no end'),
    ('{"tenant_id": null}', 'BC400', 'tenant_id is required', 'no tenant'),
    ('{"tenant_id": "tenant-1"}', 'BC400', 'tenant_id is not a valid uuid: "tenant-1"', 'a tenant that is not a uuid'),
    ('{"end": "tomorrow"}', 'BC400', 'end is not a valid timestamp: "tomorrow"', 'an end that is not a time'),
    ('{"end": "2030-13-01T00:00:00Z"}', 'BC400', 'end is not a valid time: 2030-13-01T00:00:00Z', 'an end in month 13'),
    ('{"end": "2030-01-01T02:00:00"}', 'BC400', 'end is not a valid timestamp: "2030-01-01T02:00:00"', 'an end without its offset'),
    ('{"end": "2030-01-01T02:00:00+22:13"}', 'BC400', 'end is not a valid time: 2030-01-01T02:00:00+22:13',
     'an offset PostgreSQL cannot take (it allows up to 15:59)'),
    ('{"hold_seconds": 0}', 'BC400', 'hold_seconds 0 is out of range', 'a lease of 0 s'),
    ('{"pool_id": "00000000-0000-0000-0000-0000000000ff"}', 'BC404', 'no pool 00000000-0000-0000-0000-0000000000ff', 'a pool that does not exist'),
    ('{"project_id": "00000000-0000-0000-0000-0000000000ff"}', 'BC404', 'no project 00000000-0000-0000-0000-0000000000ff in this tenant',
     'a project that does not exist')
  ) AS c(change, sqlstate, message, description);
SELECT is((SELECT count(*)::integer FROM compute.reservations AS r, t WHERE r.pool_id = t.pool), 0, 'no refused request left a reservation');

SELECT is(compute.reserve(pgtap_fixtures.request(pool, 'gpu', 1, '2029-12-31 23:59:30+00', '2030-01-01 02:00+00')) ->> 'start',
          '2030-01-01T00:00:00+00:00', 'a start 30 s ago means now') FROM t;

SELECT * FROM finish();
ROLLBACK;
