-- Revert better_compute:extensions from pg

BEGIN;

DROP EXTENSION btree_gist;

COMMIT;
