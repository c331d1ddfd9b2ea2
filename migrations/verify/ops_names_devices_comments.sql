-- Verify better_compute:ops_names_devices_comments on pg
-- ops.*: an ambiguous node name is refused naming each node (site/name or the id picks one); not-found errors name the GPU and the booking; ops.devices; column comments on the views operators read
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT device_uuid, site, pool, node, atoms, atoms_held_now, critical_conditions FROM ops.devices WHERE false;

ROLLBACK;
