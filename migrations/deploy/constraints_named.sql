-- Deploy better_compute:constraints_named to pg
-- Constraints have the names sql/ gives them: the 19 that PostgreSQL had numbered (reservations_check ...) get names that say what they hold (reservations_provisional_has_expiry ...)
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE api.methods RENAME CONSTRAINT methods_check TO methods_action_follows_method;

ALTER TABLE api.methods RENAME CONSTRAINT methods_check1 TO methods_resource_key_in_input;

ALTER TABLE api.methods RENAME CONSTRAINT methods_check2 TO methods_parent_key_in_input;

ALTER TABLE api.methods RENAME CONSTRAINT methods_check3 TO methods_mutation_fields_only_on_mutations;

ALTER TABLE api.methods RENAME CONSTRAINT methods_check4 TO methods_prepare_with_void;

ALTER TABLE compute.admissions RENAME CONSTRAINT admissions_check TO admissions_pending_until_decided;

ALTER TABLE compute.atoms RENAME CONSTRAINT atoms_check TO atoms_mig_has_profile_and_placement;

ALTER TABLE compute.atoms RENAME CONSTRAINT atoms_check1 TO atoms_slot_has_slot_and_count;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_check TO join_tokens_expire_after_creation;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_check1 TO join_tokens_used_has_used_at;

ALTER TABLE compute.join_tokens RENAME CONSTRAINT join_tokens_check2 TO join_tokens_revoked_has_revoked_at;

ALTER TABLE compute.node_commands RENAME CONSTRAINT node_commands_check TO node_commands_pending_until_finished;

ALTER TABLE compute.node_flags RENAME CONSTRAINT node_flags_check TO node_flags_completed_only_when_draining;

ALTER TABLE compute.node_reports RENAME CONSTRAINT node_reports_check TO node_reports_rejected_has_reason;

ALTER TABLE compute.node_specs RENAME CONSTRAINT node_specs_check TO node_specs_signed_at_most_generation;

ALTER TABLE compute.node_specs RENAME CONSTRAINT node_specs_check1 TO node_specs_observed_at_most_generation;

ALTER TABLE compute.reservations RENAME CONSTRAINT reservations_check TO reservations_provisional_has_expiry;

ALTER TABLE compute.reservations RENAME CONSTRAINT reservations_check1 TO reservations_lease_has_hold_until;

ALTER TABLE compute.work RENAME CONSTRAINT work_check TO work_running_has_lease;

COMMIT;
