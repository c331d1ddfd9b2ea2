-- Deploy better_compute:placement_walks_past_locked_devices to pg
-- Placement skips devices lost to concurrent placements (locked, or their atoms taken) and keeps
-- walking the pool's order, instead of giving up after 3 attempts: under 8 sessions on a young
-- 1,200-GPU pack pool about one request in ten failed with CAPACITY_CONFLICT while most of it was free.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.place(p_pool_id uuid, p_shape text, p_count integer, p_during tstzrange, p_same_node boolean DEFAULT false)
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
-- Lock order: the chosen devices, FOR UPDATE SKIP LOCKED, in device_id order within each choice. A
-- later choice may lock devices ordered before those already held, but never waits for one, so it
-- cannot deadlock with placements (which never wait) nor with the waiting lockers (extend, layout
-- change, node flags: device_id order).
DECLARE
    v_pack       boolean;
    v_limit      bigint;
    v_skip       uuid[] := '{}';   -- devices lost to concurrent placements: locked, or their atoms taken
    v_skipped    integer;          -- how many were skipped when the candidates were scanned
    v_scanned    integer;
    v_candidates compute.placement_candidate[];
    v_chosen     uuid[];
    v_devices    uuid[];
    v_locked     uuid[];
    v_lost       uuid[];
BEGIN
    v_pack := (compute.pool_get(p_pool_id)).placement_policy = 'pack';
    v_limit := greatest(compute.limit('placement_candidates'), p_count * 8);
    LOOP
        -- 1. candidates, past the devices skipped so far.
        -- Spread order (GPU index across nodes) suits single atoms; a multi-atom request needs
        -- candidates node by node to find a node that fits, and spread then takes the least used.
        v_candidates := compute.place_candidates(p_pool_id, p_shape, p_during, NOT v_pack AND p_count = 1, v_skip, v_limit);
        v_scanned := pg_catalog.cardinality(v_candidates);
        v_skipped := pg_catalog.cardinality(v_skip);
        LOOP
            -- 2. choice among the candidates left.
            v_chosen := compute.place_choose(v_candidates, p_count, p_during, v_pack, p_same_node);
            EXIT WHEN v_chosen IS NULL;
            SELECT pg_catalog.array_agg(DISTINCT c.device_id) INTO v_devices
              FROM pg_catalog.unnest(v_candidates) AS c WHERE c.atom_id = ANY (v_chosen);

            -- 3. lock the devices; a device a concurrent placement holds is skipped, never waited for.
            SELECT pg_catalog.array_agg(l.device_id) INTO v_locked
              FROM (SELECT d.device_id FROM compute.devices AS d WHERE d.device_id = ANY (v_devices)
                     ORDER BY d.device_id FOR UPDATE SKIP LOCKED) AS l;

            -- 4. recheck with this statement's fresh snapshot; the devices lost are left out and the
            --    choice is made again from the same candidates (devices locked but not used stay
            --    locked by this transaction, and may be chosen again).
            SELECT pg_catalog.array_agg(DISTINCT a.device_id) INTO v_lost
              FROM compute.atoms AS a
             WHERE a.atom_id = ANY (v_chosen)
               AND (NOT a.device_id = ANY (coalesce(v_locked, '{}'))
                    OR NOT (compute.atom_is_schedulable(a, p_during) AND compute.atom_is_free(a, p_during)));
            IF v_lost IS NULL THEN
                RETURN v_chosen;
            END IF;
            v_skip := v_skip || v_lost;
            SELECT coalesce(pg_catalog.array_agg(c), '{}') INTO v_candidates
              FROM pg_catalog.unnest(v_candidates) AS c WHERE NOT c.device_id = ANY (v_lost);
        END LOOP;
        -- The candidates left cannot meet the request. Walk on past the lost devices if any were lost
        -- since the scan and the scan stopped at its limit (else it saw every free atom already).
        -- Each walk skips at least one more device, so this ends within the pool's devices.
        EXIT WHEN pg_catalog.cardinality(v_skip) = v_skipped OR v_scanned < v_limit;
    END LOOP;
    PERFORM compute.raise_error('CAPACITY_CONFLICT',
        pg_catalog.format('cannot place %s x %s in pool %s during %s', p_count, p_shape, p_pool_id, p_during),
        compute.place_shortfall(p_pool_id, p_shape, p_count, p_during, p_same_node));
END
$function$;

COMMIT;
