-- A denied instances.create leaves nothing held: the instance failed (not admitted), its bookings
-- void, nothing in the node's spec; the decision is audited once.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT is(pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 2), false) #>> '{error,code}',
          'ACCESS_DENIED', 'denied');
SELECT is((SELECT state || ': ' || failure FROM compute.instances), 'failed: not admitted', 'the instance failed: not admitted');
SELECT is((SELECT count(*) FROM compute.bookings WHERE pool_id = :'pool' AND state = 'held'), 0::bigint, 'no booking is live');

SELECT * FROM finish();
ROLLBACK;
