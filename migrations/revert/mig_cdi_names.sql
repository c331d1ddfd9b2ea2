-- Revert better_compute:mig_cdi_names from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.cdi_name(text,text,text);

DROP FUNCTION compute.inventory_mig_uuid(jsonb,text,text,integer);

DROP FUNCTION compute.mig_cdi_device(text);

CREATE OR REPLACE FUNCTION compute.atom_cdi_name(p_atom_id uuid)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
-- The CDI device name a node exposes for an atom (kind nvidia.com/gpu): a whole GPU or slot by
-- the GPU's uuid, a MIG instance by its MIG uuid when the inventory reports one, else GPU:placement.
-- (PL/pgSQL, like the other per-reservation helpers: its plan is kept instead of made per call.)
BEGIN
    RETURN (SELECT 'nvidia.com/gpu=' || CASE a.kind
        WHEN 'mig' THEN coalesce(
            (SELECT i ->> 'uuid'
               FROM compute.nodes AS n, pg_catalog.jsonb_array_elements(n.inventory -> 'devices') AS dev,
                    pg_catalog.jsonb_array_elements(coalesce(dev #> '{mig,instances}', '[]')) AS i
              WHERE n.node_id = a.node_id AND dev ->> 'uuid' = d.uuid
                AND i ->> 'profile' = a.profile AND (i ->> 'placement')::integer = a.placement),
            d.index || ':' || a.placement)
        ELSE d.uuid END
      FROM compute.atoms AS a JOIN compute.devices AS d ON d.device_id = a.device_id
     WHERE a.atom_id = p_atom_id);
END
$function$;

COMMENT ON FUNCTION compute.atom_cdi_name(uuid) IS 'CDI device name of an atom (nvidia.com/gpu=...).';

CREATE OR REPLACE FUNCTION compute.inventory_layout(p_device jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- A GPU in MIG mode with instances starts with those instances as its layout; otherwise whole.
    SELECT CASE
        WHEN p_device #>> '{mig,mode}' = 'enabled' AND pg_catalog.jsonb_array_length(coalesce(p_device #> '{mig,instances}', '[]')) > 0
        THEN 'mig:' || (SELECT pg_catalog.string_agg((i ->> 'profile') || '@' || (i ->> 'placement'), ',' ORDER BY (i ->> 'placement')::integer)
                          FROM pg_catalog.jsonb_array_elements(p_device #> '{mig,instances}') AS i)
        ELSE 'whole'
    END
$function$;

COMMENT ON FUNCTION compute.inventory_layout(jsonb) IS 'The layout a newly seen GPU starts with: its MIG instances, or whole.';

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now.
    RETURN (SELECT pg_catalog.jsonb_build_object('node_id', p_node_id, 'devices', coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', d.uuid, 'index', d.index, 'kind', a.kind, 'profile', a.profile,
                           'placement', a.placement, 'slot', a.slot, 'cdi_name', compute.atom_cdi_name(a.atom_id),
                           'reservation_id', b.reservation_id, 'until', upper(b.during))
                       ORDER BY d.index, a.placement, a.slot), '[]'))
              FROM compute.bookings AS b
              JOIN compute.atoms AS a ON a.atom_id = b.atom_id
              JOIN compute.devices AS d ON d.device_id = b.device_id
             WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> compute.compute_now());
END
$function$;

COMMIT;
