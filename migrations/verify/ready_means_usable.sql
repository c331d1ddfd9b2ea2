-- Verify better_compute:ready_means_usable on pg

BEGIN;

SELECT compute.limit('withdrawal_grace_seconds');
SELECT booking_id, node_id, granted_generation, withdrawn_generation, report_generation, exposure, reason,
       withdrawal_acked_generation, fenced_by, fenced_reason, fenced_at
  FROM compute.node_grants WHERE false;
SELECT 1 / (compute.node_spec_document(gen_random_uuid()) ? 'withdrawal')::integer;
SELECT 1 / (compute.bookings_readiness('[]') ->> 'state' = 'not_running')::integer;
SELECT state, reason FROM ops.readiness WHERE false;
SELECT node, reservation_id FROM ops.withdrawals WHERE false;
SELECT 'ops.node_fence(text, text)'::regprocedure;

ROLLBACK;
