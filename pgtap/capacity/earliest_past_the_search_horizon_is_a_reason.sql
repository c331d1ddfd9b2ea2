-- compute.capacity_earliest looks capacity_search_horizon_seconds (90 days) ahead of now. A
-- not_before past that horizon is answered with NULLs and the reason, not an internal error (the
-- search range would run backwards; found by schemathesis asking for a window in year 5824).
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;

SELECT is((SELECT row(e.start_at, e.end_at)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '1 hour', '2030-03-31 00:00+00') AS e),
          '("2030-03-31 00:00:00+00","2030-03-31 01:00:00+00")', 'not_before 89 days ahead: found there');
SELECT is((SELECT row(e.start_at, e.end_at)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '1 hour', '2030-04-01 00:00+00') AS e),
          '("2030-04-01 00:00:00+00","2030-04-01 01:00:00+00")', 'not_before at the horizon itself (90 days): still found');
SELECT is((SELECT row(e.*)::text FROM t, compute.capacity_earliest(t.pool, 'gpu', 1, '1 hour', '2030-04-01 00:00:01+00') AS e),
          '(,,"not_before 2030-04-01 00:00:01+00 is past the search horizon 2030-04-01 00:00:00+00 (limit capacity_search_horizon_seconds); ask again nearer the time")',
          'a second past the horizon: NULLs and why');
SELECT is((SELECT row(e.start_at, e.end_at)::text || ' ' || (e.reason LIKE 'not_before % is past the search horizon %')::text
             FROM t, compute.capacity_earliest(t.pool, 'gpu', 19298, '8153 seconds', '5824-02-17 12:40:35+07:16') AS e),
          '(,) true', 'year 5824 (what schemathesis sent): NULLs and why');

SELECT * FROM finish();
ROLLBACK;
