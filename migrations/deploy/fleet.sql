-- Deploy better_compute:fleet to pg (reworked after @v0.3.0)
-- Nothing to deploy. The objects of fleet are those fleet@v0.3.0 made, as later changes left them
-- (sites, pools, nodes, node flags and devices; api_ids changed site_create's and pool_create's arguments). This instance carries verify/fleet.sql, which checks what still holds; it supersedes
-- verify/fleet@v0.3.0.sql, the script @v0.2.0 released, which Sqitch and our runner no longer run
-- (docs/migrations.md, "A later change supersedes a verify script").

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
