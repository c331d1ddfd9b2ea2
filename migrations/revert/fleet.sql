-- Revert better_compute:fleet from pg (reworked after @v0.3.0)
-- Nothing to revert: the deploy script changes nothing.

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
