-- Revert better_compute:outbox from pg (reworked after @v0.4.0)
-- Nothing to revert: the deploy script changes nothing.

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
