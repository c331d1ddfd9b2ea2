-- Extensions the schema needs. btree_gist gives GiST the equality operators on uuid that the
-- booking exclusion constraint combines with range overlap (docs/architecture.md §6). Created by the deployer
-- (a trusted extension needs CREATE on the database, which bc_owner does not hold).
CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA compute;
