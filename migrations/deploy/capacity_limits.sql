-- Deploy better_compute:capacity_limits to pg (reworked after @v0.3.0)
-- Nothing to deploy. The objects of capacity_limits are those capacity_limits@v0.3.0 made, as later changes left them
-- (the limits of the capacity core, less capacity_search_checks (v0_2_0_repairs removed it)). This instance carries verify/capacity_limits.sql, which checks what still holds; it supersedes
-- verify/capacity_limits@v0.3.0.sql, the script @v0.2.0 released, which Sqitch and our runner no longer run
-- (docs/migrations.md, "A later change supersedes a verify script").

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
