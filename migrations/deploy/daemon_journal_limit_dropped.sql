-- Deploy better_compute:daemon_journal_limit_dropped to pg
-- daemon_journal_entries was read by nothing: the journal is the daemon's own file on the node, and
-- its bound is the daemon's (py/better_compute/daemon/journal.py, DEFAULT_BOUND). A limit the
-- control plane cannot apply is not one place for the fact, so the row goes.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM compute.limits WHERE name = 'daemon_journal_entries';

COMMIT;
