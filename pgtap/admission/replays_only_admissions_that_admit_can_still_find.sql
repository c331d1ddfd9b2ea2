-- api.prepare answers a stored admission for a repeated idempotency key only while api.admit can
-- still find it: a decided admission until admission_seconds before the expiry sweep may prune it
-- (admission_retention_seconds after its decision). Past that, the key starts a new admission, so
-- a sweep between prepare and admit never turns a retry into NOT_FOUND.
BEGIN;
SELECT plan(5);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT jsonb_build_object('node_id', pgtap_fixtures.node(:'pool', 1), 'reason', 'fan', 'idempotency_key', 'cordon-1') AS input \gset
SELECT api.prepare('nodes.cordon', pgtap_fixtures.tenant('A'), :'input') ->> 'admission_id' AS first \gset
SELECT api.admit(:'first', '{"allowed": true, "principal": "user:alice"}') ? 'data';

-- Retention less admission_seconds, less one second: still replayed.
SELECT compute.clock_pin('2030-01-01 00:00+00'::timestamptz + (compute.limit('admission_retention_seconds')
       - compute.limit('admission_seconds') - 1) * interval '1 second', true);
SELECT is(api.prepare('nodes.cordon', pgtap_fixtures.tenant('A'), :'input') ->> 'admission_id', :'first'::text,
          'a retry while the admission outlives an admit answers it');

-- One second before the sweep may prune it: a new admission, which the sweep leaves alone.
SELECT compute.clock_pin('2030-01-01 00:00+00'::timestamptz + (compute.limit('admission_retention_seconds') - 1) * interval '1 second', true);
SELECT api.prepare('nodes.cordon', pgtap_fixtures.tenant('A'), :'input') ->> 'admission_id' AS second \gset
SELECT isnt(:'second', :'first'::text, 'a retry too close to the prune gets a new admission');
SELECT compute.clock_advance(interval '2 seconds', true);
SELECT compute.admissions_expire();
SELECT is(api.admit(:'second', '{"allowed": true, "principal": "user:alice"}') #>> '{data,flags,0}', 'cordoned',
          'admit finds it after the sweep');
SELECT is((SELECT count(*)::integer FROM compute.admissions WHERE admission_id = :'first'), 0, 'the old admission is gone');
SELECT is((SELECT count(*)::integer FROM compute.audit_events WHERE action = 'compute:nodes:cordon'), 2,
          'both admissions were audited');

SELECT * FROM finish();
ROLLBACK;
