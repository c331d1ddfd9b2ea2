-- Deploy better_compute:capacity_free_reads_atom_busy to pg
-- capacity_free reads compute.atom_busy (the atoms' busy windows, as placement does), never bookings; a window that has ended is INVALID_ARGUMENT, a window's past part is not asked about
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.capacity_free(p_pool_id uuid, p_shape text, p_start timestamp with time zone, p_end timestamp with time zone)
 RETURNS TABLE(node_id uuid, node_name text, free_atoms integer, atom_ids uuid[])
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    IF p_end <= v_now THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('the window ended at %s', p_end),
            'Ask for a window that ends after now: what is free can still be booked.');
    END IF;
    PERFORM compute.pool_get(p_pool_id);
    -- The schedulable atoms of the shape whose busy windows (compute.atom_busy, kept by the bookings
    -- triggers, as placement reads them) leave the window free: one walk of the pool's atoms of the
    -- shape, never the bookings, whose table grows with the pool's history. A window's past part
    -- cannot be booked and is not asked about (the summaries hold no past); the checks of
    -- compute.atom_is_schedulable are spelled out (no per-atom function call).
    RETURN QUERY
    WITH free AS (
        SELECT s.node_id, s.atom_id, s.device_index, s.slices, s.slot
          FROM compute.atom_busy AS s
         WHERE s.pool_id = p_pool_id AND s.shape = p_shape
           AND lower(s.valid) <= p_start AND (upper_inf(s.valid) OR upper(s.valid) >= p_end)
           AND NOT (s.busy && tstzrange(greatest(p_start, v_now), p_end))
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = s.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = s.device_id AND NOT x.present)
    ), per_node AS (
        SELECT f.node_id, count(*)::integer AS free_atoms,
               pg_catalog.array_agg(f.atom_id ORDER BY f.device_index, f.slices, f.slot) AS atom_ids
          FROM free AS f GROUP BY f.node_id
    )
    SELECT p.node_id, n.name, p.free_atoms, p.atom_ids
      FROM per_node AS p JOIN compute.nodes AS n ON n.node_id = p.node_id
     ORDER BY n.rank;
END
$function$;

COMMIT;
