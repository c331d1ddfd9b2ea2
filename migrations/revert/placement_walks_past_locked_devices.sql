-- Revert better_compute:placement_walks_past_locked_devices from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
-- Lock order: the chosen devices, FOR UPDATE SKIP LOCKED, in device_id order (never waits).
DECLARE
    v_pack       boolean;
    v_skip       uuid[] := '{}';
    v_candidates compute.placement_candidate[];
    v_chosen     uuid[];
    v_devices    uuid[];
    v_locked     uuid[];
    v_attempt    integer;
BEGIN
    v_pack := (compute.pool_get(p_pool_id)).placement_policy = 'pack';
    FOR v_attempt IN 1..3 LOOP
        -- 1-2. candidates and choice.
        -- Spread order (GPU index across nodes) suits single atoms; a multi-atom request needs
        -- candidates node by node to find a node that fits, and spread then takes the least used.
        v_candidates := compute.place_candidates(p_pool_id, p_shape, p_during, NOT v_pack AND p_count = 1, v_skip,
                                                 greatest(compute.limit('placement_candidates'), p_count * 8));
        v_chosen := compute.place_choose(v_candidates, p_count, p_during, v_pack, p_same_node);
        EXIT WHEN v_chosen IS NULL;
        SELECT pg_catalog.array_agg(DISTINCT a.device_id) INTO v_devices FROM compute.atoms AS a WHERE a.atom_id = ANY (v_chosen);

        -- 3. lock the devices; a device a concurrent placement holds is skipped, never waited for.
        SELECT pg_catalog.array_agg(l.device_id) INTO v_locked
          FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                 ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;

        -- 4. recheck with this statement's fresh snapshot.
        IF pg_catalog.cardinality(v_locked) = pg_catalog.cardinality(v_devices)
           AND NOT EXISTS (SELECT 1 FROM compute.atoms AS a
                            WHERE a.atom_id = ANY (v_chosen)
                              AND NOT (compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during))) THEN
            RETURN v_chosen;
        END IF;
        v_skip := v_skip || v_devices;
    END LOOP;
    PERFORM compute.raise_error('CAPACITY_CONFLICT',
        pg_catalog.format('cannot place %s x %s in pool %s during %s', p_count, p_shape, p_pool_id, p_during),
        compute.place_shortfall(p_pool_id, p_shape, p_count, p_during, p_same_node));
END
$function$;

COMMIT;
