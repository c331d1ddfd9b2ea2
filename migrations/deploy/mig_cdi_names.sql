-- Deploy better_compute:mig_cdi_names to pg
-- A node never exposes a device nobody holds (issue 11): a MIG atom's CDI name is the MIG UUID of
-- the one MIG device its node reports with the atom's profile and placement (compute.inventory_mig_uuid),
-- a legacy MIG-GPU-<gpu>/<gi>/<ci> UUID rewritten to a CDI name (compute.mig_cdi_device), else NULL:
-- the '<gpu index>:<placement>' fallback, nvidia-ctk's '<gpu index>:<mig index>' syntax with another
-- meaning, is gone. The spec names each MIG atom's MIG UUID for the daemon to check. A GPU instance
-- listed once per compute instance is one GPU instance in the starting layout.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION compute.atom_cdi_name(p_atom_id uuid)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
-- The CDI device name a node exposes for an atom (compute.cdi_name), NULL where it cannot.
-- (PL/pgSQL, like the other per-reservation helpers: its plan is kept instead of made per call.)
BEGIN
    RETURN (SELECT compute.cdi_name(a.kind, d.uuid, CASE WHEN a.kind = 'mig'
                                    THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END)
              FROM compute.atoms AS a
              JOIN compute.devices AS d ON d.device_id = a.device_id
              JOIN compute.nodes AS n ON n.node_id = a.node_id
             WHERE a.atom_id = p_atom_id);
END
$function$;

COMMENT ON FUNCTION compute.atom_cdi_name(uuid) IS 'CDI device name of an atom (nvidia.com/gpu=...), NULL where its node cannot expose it.';

CREATE OR REPLACE FUNCTION compute.cdi_name(p_kind text, p_gpu_uuid text, p_mig_uuid text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- The CDI device name (kind nvidia.com/gpu) of an atom of this kind on GPU p_gpu_uuid: a whole GPU
    -- or slot by the GPU's uuid, a MIG atom by its MIG device (p_mig_uuid, compute.inventory_mig_uuid);
    -- NULL where the node cannot expose it: it is then not exposed, and the node reports a condition.
    SELECT 'nvidia.com/gpu=' || CASE p_kind WHEN 'mig' THEN compute.mig_cdi_device(p_mig_uuid) ELSE p_gpu_uuid END
$function$;

COMMENT ON FUNCTION compute.cdi_name(text,text,text) IS 'CDI device name of an atom of a kind, GPU and MIG device (nvidia.com/gpu=...), or NULL.';

CREATE OR REPLACE FUNCTION compute.inventory_layout(p_device jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- A GPU in MIG mode with instances starts with those instances as its layout; otherwise whole.
    -- The inventory lists MIG devices (compute instances): a GPU instance split into several is
    -- listed once per compute instance, and is one atom (once in the layout).
    SELECT CASE
        WHEN p_device #>> '{mig,mode}' = 'enabled' AND pg_catalog.jsonb_array_length(coalesce(p_device #> '{mig,instances}', '[]')) > 0
        THEN 'mig:' || (SELECT pg_catalog.string_agg(g.profile || '@' || g.placement, ',' ORDER BY g.placement)
                          FROM (SELECT DISTINCT i ->> 'profile' AS profile, (i ->> 'placement')::integer AS placement
                                  FROM pg_catalog.jsonb_array_elements(p_device #> '{mig,instances}') AS i) AS g)
        ELSE 'whole'
    END
$function$;

COMMENT ON FUNCTION compute.inventory_layout(jsonb) IS 'The layout a newly seen GPU starts with: its GPU instances (once each), or whole.';

CREATE OR REPLACE FUNCTION compute.inventory_mig_uuid(p_inventory jsonb, p_gpu_uuid text, p_profile text, p_placement integer)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
-- The MIG UUID of the MIG device a MIG atom (profile, placement) of GPU p_gpu_uuid is on a node
-- with this inventory: the one MIG device it reports on that GPU, in MIG mode, with that profile
-- and placement. NULL where there is none (not created yet, or another profile at that placement:
-- a GPU re-laid while its old instances still exist) or several (a GPU instance split into compute
-- instances is not one device). (PL/pgSQL: its plan is kept, where a SQL function's would be made
-- per call of atom_cdi_name.)
BEGIN
    RETURN (SELECT CASE WHEN pg_catalog.count(*) = 1 THEN pg_catalog.min(i ->> 'uuid') END
              FROM pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(p_inventory -> 'devices') = 'array'
                                                        THEN p_inventory -> 'devices' ELSE '[]' END) AS dev,
                   pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(dev #> '{mig,instances}') = 'array'
                                                        THEN dev #> '{mig,instances}' ELSE '[]' END) AS i
             WHERE dev ->> 'uuid' = p_gpu_uuid AND dev #>> '{mig,mode}' = 'enabled'
               AND i -> 'profile' = pg_catalog.to_jsonb(p_profile) AND i -> 'placement' = pg_catalog.to_jsonb(p_placement));
END
$function$;

COMMENT ON FUNCTION compute.inventory_mig_uuid(jsonb,text,text,integer) IS 'The MIG UUID of the one MIG device of a GPU, profile and placement an inventory reports; else NULL.';

CREATE OR REPLACE FUNCTION compute.mig_cdi_device(p_mig_uuid text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- The CDI device name of a MIG device: its MIG UUID; a legacy UUID (drivers before R470:
    -- MIG-GPU-<gpu uuid>/<gi>/<ci>), which CDI names cannot hold ('/'), as MIG-GPU-<gpu uuid>-gi<gi>-ci<ci>;
    -- NULL for anything else (CDI's rule: [A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?, and never a
    -- name nvidia-ctk gives another meaning: <index>, <gpu index>:<mig index>, all).
    SELECT CASE
        WHEN p_mig_uuid ~ '^MIG-GPU-[0-9A-Fa-f-]+/[0-9]+/[0-9]+$'
        THEN pg_catalog.regexp_replace(p_mig_uuid, '^(MIG-GPU-[0-9A-Fa-f-]+)/([0-9]+)/([0-9]+)$', '\1-gi\2-ci\3')
        WHEN p_mig_uuid ~ '^MIG-[A-Za-z0-9_.-]*[A-Za-z0-9]$' THEN p_mig_uuid
    END
$function$;

COMMENT ON FUNCTION compute.mig_cdi_device(text) IS 'The CDI device name of a MIG UUID (a legacy one rewritten), or NULL where it makes none.';

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now; a
    -- MIG atom with the UUID of the MIG device it is, which the daemon checks against its own
    -- inventory with the profile and placement (a null cdi_name: not exposed, a condition).
    RETURN (SELECT pg_catalog.jsonb_build_object('node_id', p_node_id, 'devices', coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until)
                       ORDER BY x.index, x.placement, x.slot), '[]'))
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until,
                           CASE WHEN a.kind = 'mig' THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END
                               AS mig_uuid
                      FROM compute.bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> compute.compute_now()
                    OFFSET 0) AS x);  -- OFFSET 0: the subquery stays one, so mig_uuid is computed once per row
END
$function$;

COMMIT;
