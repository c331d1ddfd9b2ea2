-- Revert better_compute:daemon_journal_limit_dropped from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description)
VALUES ('daemon_journal_entries', 4096, 'count', 'Executed command ids the node daemon remembers.');

COMMIT;
