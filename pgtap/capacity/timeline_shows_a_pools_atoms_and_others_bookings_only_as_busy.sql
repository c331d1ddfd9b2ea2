-- capacity.timeline (what the web console draws): a pool's nodes, GPUs and the atoms valid in the
-- window (a MIG GPU's instances as atoms of their own), and the bookings over the window. The
-- caller's own come with their reservation; anyone else's only as busy: atom and window, nothing
-- about whose; once released, another's booking is not shown, the caller's own is (as released). A
-- window must end after it starts and be at most capacity_search_horizon_seconds.
BEGIN;
SELECT plan(9);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- Tenant A's pool: one node of two GPUs, GPU 1 split into two 3g.71gb instances.
SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4')
  FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(:'pool', 1) AND d.index = 1;
-- A's reservation of GPU 0 from 00:00 to 02:00, through the API.
SELECT pgtap_fixtures.api('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 1, 'end', '2030-01-01T02:00:00Z')) #>> '{data,reservation_id}' AS mine \gset
-- Someone else's booking of one instance from 01:00 to 03:00 (as in a pool several tenants book:
-- written by compute.reserve while the site is an operator's, then the site is A's again).
UPDATE compute.sites SET tenant_id = NULL WHERE site_id = (SELECT site_id FROM compute.pools WHERE pool_id = :'pool');
SELECT pgtap_fixtures.book(:'pool', 'mig:3g.71gb', 1, '2030-01-01 01:00+00', '2030-01-01 03:00+00',
                           jsonb_build_object('tenant_id', pgtap_fixtures.tenant('B'))) ->> 'reservation_id' AS theirs \gset
UPDATE compute.sites SET tenant_id = pgtap_fixtures.tenant('A') WHERE site_id = (SELECT site_id FROM compute.pools WHERE pool_id = :'pool');

SELECT pgtap_fixtures.api('capacity.timeline', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'start', '2029-12-31T23:00:00Z', 'end', '2030-01-02T00:00:00Z')) -> 'data' AS t \gset

SELECT is((SELECT jsonb_agg(jsonb_build_object('index', d -> 'index', 'shapes',
                                               (SELECT jsonb_agg(a -> 'shape') FROM jsonb_array_elements(d -> 'atoms') AS a)))
             FROM jsonb_array_elements(:'t'::jsonb #> '{nodes,0,devices}') AS d),
          '[{"index": 0, "shapes": ["gpu"]}, {"index": 1, "shapes": ["mig:3g.71gb", "mig:3g.71gb"]}]',
          'one node: GPU 0 whole, GPU 1 as its two MIG instances');
SELECT is(:'t'::jsonb -> 'now', '"2030-01-01T00:00:00+00:00"', 'the answer carries the database''s now (one clock)');
SELECT is((SELECT b - 'readiness' - 'atom_id' - 'project_id' FROM jsonb_array_elements(:'t'::jsonb -> 'bookings') AS b WHERE b ? 'reservation_id'),
          jsonb_build_object('start', '2030-01-01T00:00:00+00:00', 'end', '2030-01-01T02:00:00+00:00', 'state', 'active',
                             'reservation_id', :'mine', 'shape', 'gpu'),
          'the caller''s own booking comes with its reservation, shape and state');
SELECT is((SELECT b - 'atom_id' FROM jsonb_array_elements(:'t'::jsonb -> 'bookings') AS b WHERE b ? 'busy'),
          '{"start": "2030-01-01T01:00:00+00:00", "end": "2030-01-01T03:00:00+00:00", "busy": true}',
          'another tenant''s booking is only busy: its window, nothing about whose');
SELECT ok(position(:'theirs' IN :'t') = 0 AND position(pgtap_fixtures.tenant('B')::text IN :'t') = 0,
          'neither the other reservation''s id nor its tenant appears anywhere in the answer');

-- At 01:30 both reservations are released.
SELECT compute.clock_advance('90 minutes', true);
SELECT count(*) AS released FROM (SELECT compute.reservation_release(:'mine'), compute.reservation_release(:'theirs')) AS r;
SELECT pgtap_fixtures.api('capacity.timeline', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'start', '2029-12-31T23:00:00Z', 'end', '2030-01-02T00:00:00Z')) -> 'data' -> 'bookings' AS released \gset
SELECT is((SELECT jsonb_agg(b ->> 'reservation_id') FROM jsonb_array_elements(:'released'::jsonb) AS b), jsonb_build_array(:'mine'),
          'released, another''s booking is no longer shown; the caller''s own is');
SELECT is(:'released'::jsonb #>> '{0,state}' || ' until ' || (:'released'::jsonb #>> '{0,end}'), 'released until 2030-01-01T01:30:00+00:00',
          'the caller''s own shows as released, ending when it was released');

SELECT is(left(pgtap_fixtures.refusal(format('SELECT api.read(''capacity.timeline'', %L, %L, ''{"allowed": true}'')',
              pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool', 'start', '2030-01-02T00:00:00Z', 'end', '2030-01-01T00:00:00Z'))), 5),
          'BC400', 'a window that ends before it starts is INVALID_ARGUMENT');
SELECT is(left(pgtap_fixtures.refusal(format('SELECT api.read(''capacity.timeline'', %L, %L, ''{"allowed": true}'')',
              pgtap_fixtures.tenant('A'), jsonb_build_object('pool_id', :'pool', 'end', '2031-01-01T00:00:00Z'))), 5),
          'BC400', 'a window longer than capacity_search_horizon_seconds is INVALID_ARGUMENT');

SELECT * FROM finish();
ROLLBACK;
