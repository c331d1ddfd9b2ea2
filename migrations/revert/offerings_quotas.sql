-- Revert better_compute:offerings_quotas from pg (reworked after @v0.3.0)
-- Nothing to revert: the deploy script changes nothing.

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
