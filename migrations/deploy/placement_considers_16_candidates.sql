-- Deploy better_compute:placement_considers_16_candidates to pg
-- placement_candidates 64 -> 16: a placement considers 16 free atoms (at least 8 per atom asked for); the candidate scan and the choice cost about half (docs/capacity.md)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

-- By hand: the limit's new default; a value an operator chose is kept.
UPDATE compute.limits SET value = CASE WHEN value = 64 THEN 16 ELSE value END,
       description = 'Free atoms one placement considers (at least 8 per atom a request asks for).'
 WHERE name = 'placement_candidates';


COMMIT;
