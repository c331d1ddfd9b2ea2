-- Revert better_compute:daemon_journal_limit_dropped from pg

BEGIN;

SET LOCAL ROLE bc_owner;

INSERT INTO compute.limits (name, value, unit, description)
VALUES ('daemon_journal_entries', 4096, 'count', 'Executed command ids the node daemon remembers.');

COMMIT;
