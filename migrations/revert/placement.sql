-- Revert better_compute:placement from pg

BEGIN;

DROP FUNCTION compute.place(uuid, text, integer, tstzrange, boolean);
DROP FUNCTION compute.place_shortfall(uuid, text, integer, tstzrange, boolean);
DROP FUNCTION compute.place_choose(compute.placement_candidate[], integer, tstzrange, boolean, boolean);
DROP FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint);
DROP FUNCTION compute.atom_is_schedulable(compute.atoms, tstzrange);
DROP FUNCTION compute.atom_is_free(compute.atoms, tstzrange);
DROP TYPE compute.placement_candidate;

COMMIT;
