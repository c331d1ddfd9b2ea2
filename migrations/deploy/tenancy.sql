-- Deploy better_compute:tenancy to pg (reworked after @v0.3.0)
-- Nothing to deploy. The objects of tenancy are those tenancy@v0.3.0 made, as later changes left them
-- (tenants and projects; api_ids changed project_create's arguments). This instance carries verify/tenancy.sql, which checks what still holds; it supersedes
-- verify/tenancy@v0.3.0.sql, the script @v0.2.0 released, which Sqitch and our runner no longer run
-- (docs/migrations.md, "A later change supersedes a verify script").

BEGIN;

SET LOCAL ROLE bc_owner;

COMMIT;
