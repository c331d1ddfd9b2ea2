-- Revert better_compute:placement_considers_16_candidates from pg
-- placement_candidates 64 -> 16: a placement considers 16 free atoms (at least 8 per atom asked for); the candidate scan and the choice cost about half (docs/capacity.md)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

UPDATE compute.limits SET value = CASE WHEN value = 16 THEN 64 ELSE value END,
       description = 'Free atoms one placement considers (more only when a request asks for more).'
 WHERE name = 'placement_candidates';


COMMIT;
