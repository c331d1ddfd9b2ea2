-- A spread pool takes, among the least used nodes that fit, one drawn per placement rather than the
-- first in pool order, so that concurrent placements on a fresh pool do not all reach for the first
-- node's first GPU (a one-atom request sees one GPU per node: candidates go GPU index across nodes).
-- Pack keeps the pool's order among equally used nodes: it fills node by node (pack_vs_spread.sql).
-- (Eight nodes taken in pool order by chance: 1 in 40,320.)
BEGIN;
SELECT plan(2);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('spread', 8, 1) AS pool \gset
SELECT set_config('pgtap.pool', :'pool', true);
CREATE TEMP TABLE picks (k serial, node_number integer);
DO $$
DECLARE
    v_uuid text;
BEGIN
    FOR i IN 1..8 LOOP
        v_uuid := pgtap_fixtures.book(current_setting('pgtap.pool')::uuid, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00')
                  #>> '{bookings,0,device_uuid}';
        INSERT INTO picks (node_number)
        SELECT (SELECT count(*)::integer FROM compute.nodes AS m WHERE m.pool_id = n.pool_id AND m.rank <= n.rank)
          FROM compute.devices AS d JOIN compute.nodes AS n USING (node_id) WHERE d.uuid = v_uuid;
    END LOOP;
END
$$;
SELECT is((SELECT array_agg(node_number ORDER BY node_number) FROM picks), ARRAY[1, 2, 3, 4, 5, 6, 7, 8],
          'eight one-GPU requests take one GPU of each of the eight nodes (spread)');
SELECT isnt((SELECT array_agg(node_number ORDER BY k) FROM picks), ARRAY[1, 2, 3, 4, 5, 6, 7, 8],
            'not in pool order');

SELECT * FROM finish();
ROLLBACK;
