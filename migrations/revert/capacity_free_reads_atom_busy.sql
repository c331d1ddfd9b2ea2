-- Revert better_compute:capacity_free_reads_atom_busy from pg
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
BEGIN
    IF p_start IS NULL OR p_end IS NULL OR p_end <= p_start THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'capacity_free needs a window with start < end', 'Pass start and end.');
    END IF;
    PERFORM compute.pool_get(p_pool_id);
    -- The live bookings of the pool that overlap the window (one index scan), then the schedulable
    -- atoms of the shape with none of those on their slices and shares, as a hash anti-join on the
    -- device: no per-atom or per-booking index probe, no per-atom function call (the checks of
    -- compute.atom_is_schedulable are spelled out for that reason).
    RETURN QUERY
    WITH busy AS MATERIALIZED (
        SELECT b.device_id, b.slices, b.shares
          FROM compute.bookings AS b
         WHERE b.pool_id = p_pool_id AND b.state = 'held' AND b.during && tstzrange(p_start, p_end)
    ), free AS (
        SELECT a.node_id, a.atom_id, a.device_index, a.slices, a.slot
          FROM compute.atoms AS a
         WHERE a.pool_id = p_pool_id AND a.shape = p_shape
           AND lower(a.valid) <= p_start AND (upper_inf(a.valid) OR upper(a.valid) >= p_end)
           AND NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = a.node_id)
           AND NOT EXISTS (SELECT 1 FROM compute.devices AS x WHERE x.device_id = a.device_id AND NOT x.present)
           AND NOT EXISTS (SELECT 1 FROM busy
                            WHERE busy.device_id = a.device_id AND busy.slices && a.slices AND busy.shares && a.shares)
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
