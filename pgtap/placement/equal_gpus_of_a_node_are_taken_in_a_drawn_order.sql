-- Within the chosen node, GPUs that are equal for a request are taken in an order drawn per
-- placement, so that concurrent placements on one node do not all reach for its first free GPU.
-- (Eight GPUs taken in index order by chance: 1 in 40,320.)
BEGIN;
SELECT plan(2);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 1, 8) AS pool \gset
SELECT set_config('pgtap.pool', :'pool', true);
CREATE TEMP TABLE picks (k serial, device_index integer);
DO $$
DECLARE
    v_uuid text;
BEGIN
    FOR i IN 1..8 LOOP
        v_uuid := pgtap_fixtures.book(current_setting('pgtap.pool')::uuid, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00')
                  #>> '{bookings,0,device_uuid}';
        INSERT INTO picks (device_index) SELECT d.index FROM compute.devices AS d WHERE d.uuid = v_uuid;
    END LOOP;
END
$$;
SELECT is((SELECT array_agg(device_index ORDER BY device_index) FROM picks), ARRAY[0, 1, 2, 3, 4, 5, 6, 7],
          'eight one-GPU requests take the node''s eight GPUs');
SELECT isnt((SELECT array_agg(device_index ORDER BY k) FROM picks), ARRAY[0, 1, 2, 3, 4, 5, 6, 7],
            'not in index order');

SELECT * FROM finish();
ROLLBACK;
