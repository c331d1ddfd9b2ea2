-- Verify better_compute:daemon_journal_limit_dropped on pg

BEGIN;

SELECT 1 / (count(*) = 0)::integer FROM compute.limits WHERE name = 'daemon_journal_entries';

ROLLBACK;
