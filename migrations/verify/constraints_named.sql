-- Verify better_compute:constraints_named on pg
-- Constraints have the names sql/ gives them: the 19 that PostgreSQL had numbered (reservations_check ...) get names that say what they hold (reservations_provisional_has_expiry ...)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'api.methods'::regclass AND conname = 'methods_action_follows_method';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'api.methods'::regclass AND conname = 'methods_mutation_fields_only_on_mutations';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'api.methods'::regclass AND conname = 'methods_parent_key_in_input';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'api.methods'::regclass AND conname = 'methods_prepare_with_void';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'api.methods'::regclass AND conname = 'methods_resource_key_in_input';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.admissions'::regclass AND conname = 'admissions_pending_until_decided';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.atoms'::regclass AND conname = 'atoms_mig_has_profile_and_placement';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.atoms'::regclass AND conname = 'atoms_slot_has_slot_and_count';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.join_tokens'::regclass AND conname = 'join_tokens_expire_after_creation';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.join_tokens'::regclass AND conname = 'join_tokens_revoked_has_revoked_at';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.join_tokens'::regclass AND conname = 'join_tokens_used_has_used_at';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.node_commands'::regclass AND conname = 'node_commands_pending_until_finished';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.node_flags'::regclass AND conname = 'node_flags_completed_only_when_draining';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.node_reports'::regclass AND conname = 'node_reports_rejected_has_reason';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.node_specs'::regclass AND conname = 'node_specs_observed_at_most_generation';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.node_specs'::regclass AND conname = 'node_specs_signed_at_most_generation';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.reservations'::regclass AND conname = 'reservations_lease_has_hold_until';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.reservations'::regclass AND conname = 'reservations_provisional_has_expiry';

SELECT 1 / count(*)::int FROM pg_catalog.pg_constraint WHERE conrelid = 'compute.work'::regclass AND conname = 'work_running_has_lease';

ROLLBACK;
