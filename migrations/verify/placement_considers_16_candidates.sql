-- Verify better_compute:placement_considers_16_candidates on pg
-- placement_candidates 64 -> 16: a placement considers 16 free atoms (at least 8 per atom asked for); the candidate scan and the choice cost about half (docs/capacity.md)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1 / count(*)::int FROM compute.limits WHERE name = 'placement_candidates' AND description = 'Free atoms one placement considers (at least 8 per atom a request asks for).';

ROLLBACK;
