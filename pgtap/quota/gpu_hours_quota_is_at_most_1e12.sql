-- A GPU-hour quota is at most 1e12 (the API document's maximum), also for an operator calling
-- compute.quota_set from psql: the answer stays a number every client can read.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT lives_ok(format($$SELECT compute.quota_set(%L, NULL, %L, NULL, 1e12)$$, pgtap_fixtures.tenant('A'), :'pool'), '1e12 is taken');
SELECT throws_ok(format($$SELECT compute.quota_set(%L, NULL, %L, NULL, 1e12 + 0.5)$$, pgtap_fixtures.tenant('A'), :'pool'),
                 'BC400', NULL, 'more is INVALID_ARGUMENT');
SELECT is((SELECT gpu_hours_per_month FROM compute.quotas WHERE pool_id = :'pool'), 1e12, 'the quota stays as it was');

SELECT * FROM finish();
ROLLBACK;
