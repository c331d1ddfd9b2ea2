-- Revert better_compute:constraints_named from pg
-- Constraints have the names sql/ gives them: the 19 that PostgreSQL had numbered (reservations_check ...) get names that say what they hold (reservations_provisional_has_expiry ...)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE api.methods RENAME CONSTRAINT methods_action_follows_method TO methods_check;

ALTER TABLE api.methods RENAME CONSTRAINT methods_mutation_fields_only_on_mutations TO methods_check3;

ALTER TABLE api.methods RENAME CONSTRAINT methods_parent_key_in_input TO methods_check2;

ALTER TABLE api.methods RENAME CONSTRAINT methods_prepare_with_void TO methods_check4;

ALTER TABLE api.methods RENAME CONSTRAINT methods_resource_key_in_input TO methods_check1;

ALTER TABLE compute.admissions RENAME CONSTRAINT admissions_pending_until_decided TO admissions_check;

ALTER TABLE compute.atoms RENAME CONSTRAINT atoms_mig_has_profile_and_placement TO atoms_check;

ALTER TABLE compute.atoms RENAME CONSTRAINT atoms_slot_has_slot_and_count TO atoms_check1;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_expire_after_creation TO join_tokens_check;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_revoked_has_revoked_at TO join_tokens_check2;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_used_has_used_at TO join_tokens_check1;

ALTER TABLE compute.node_commands RENAME CONSTRAINT node_commands_pending_until_finished TO node_commands_check;

ALTER TABLE compute.node_flags RENAME CONSTRAINT node_flags_completed_only_when_draining TO node_flags_check;

ALTER TABLE compute.node_reports RENAME CONSTRAINT node_reports_rejected_has_reason TO node_reports_check;

ALTER TABLE compute.node_specs RENAME CONSTRAINT node_specs_observed_at_most_generation TO node_specs_check1;

ALTER TABLE compute.node_specs RENAME CONSTRAINT node_specs_signed_at_most_generation TO node_specs_check;

ALTER TABLE compute.reservations RENAME CONSTRAINT reservations_lease_has_hold_until TO reservations_check1;

ALTER TABLE compute.reservations RENAME CONSTRAINT reservations_provisional_has_expiry TO reservations_check;

ALTER TABLE compute.work RENAME CONSTRAINT work_running_has_lease TO work_check;

COMMIT;
