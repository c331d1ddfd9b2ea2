-- Revert better_compute:api_methods from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM api.methods;

COMMIT;
