-- Deploy better_compute:offerings_quotas to pg (reworked after @v0.3.0)
-- Nothing to deploy. The objects of offerings_quotas are those offerings_quotas@v0.3.0 made, as later changes left them
-- (offerings and quotas; api_ids changed offering_create's arguments). This instance carries verify/offerings_quotas.sql, which checks what still holds; it supersedes
-- verify/offerings_quotas@v0.3.0.sql, the script @v0.2.0 released, which Sqitch and our runner no longer run
-- (docs/migrations.md, "A later change supersedes a verify script").

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
