-- Creating a site, a pool in its site or a project under a name the tenant already uses is
-- ALREADY_EXISTS (BC419, HTTP 409): the request is well formed and conflicts with what is there.
-- The same name in another tenant, or a pool of that name in another site, is fine.
BEGIN;
SELECT plan(7);

CREATE TEMP TABLE t ON COMMIT DROP AS
SELECT (pgtap_fixtures.api('sites.create', pgtap_fixtures.tenant('A'), '{"name": "lab"}') #>> '{data,site_id}')::uuid AS site,
       (pgtap_fixtures.api('sites.create', pgtap_fixtures.tenant('A'), '{"name": "lab-2"}') #>> '{data,site_id}')::uuid AS site2;
SELECT pgtap_fixtures.api('pools.create', pgtap_fixtures.tenant('A'),
                          jsonb_build_object('site_id', site, 'name', 'h200', 'gpu_model', 'NVIDIA H200')) FROM t;
SELECT pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "ml"}');

SELECT throws_ok($$SELECT pgtap_fixtures.api('sites.create', pgtap_fixtures.tenant('A'), '{"name": "lab"}')$$,
                 'BC419', 'site lab already exists', 'a site name the tenant uses');
SELECT throws_ok(format($$SELECT pgtap_fixtures.api('pools.create', pgtap_fixtures.tenant('A'), %L)$$,
                        jsonb_build_object('site_id', site, 'name', 'h200', 'gpu_model', 'NVIDIA H200')),
                 'BC419', 'pool h200 already exists in this site', 'a pool name taken in its site') FROM t;
SELECT throws_ok($$SELECT pgtap_fixtures.api('projects.create', pgtap_fixtures.tenant('A'), '{"name": "ml"}')$$,
                 'BC419', 'project ml already exists', 'a project name the tenant uses');
SELECT is(pgtap_fixtures.refusal($$SELECT compute.pool_create(site, 'h200', 'NVIDIA H100 80GB HBM3') FROM t$$),
          'BC419: A pool holds exactly one GPU model: choose another name for another model.',
          'an operator''s pool_create of a taken name for another model (its HINT says what to do)');

SELECT ok(pgtap_fixtures.api('sites.create', pgtap_fixtures.tenant('B'), '{"name": "lab"}') ? 'data', 'the same site name in another tenant');
SELECT ok(pgtap_fixtures.api('pools.create', pgtap_fixtures.tenant('A'),
                             jsonb_build_object('site_id', site2, 'name', 'h200', 'gpu_model', 'NVIDIA H200')) ? 'data',
          'the same pool name in another site') FROM t;
SELECT is((SELECT http_status FROM compute.error_codes WHERE code = 'ALREADY_EXISTS'), 409, 'which the relay answers with 409');

SELECT * FROM finish();
ROLLBACK;
