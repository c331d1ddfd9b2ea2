-- Deploy better_compute:node_worker to pg
-- Snapshot of sql/630_node_worker.sql when this change was planned.

BEGIN;

-- What the worker does for nodes: sign specs and commands (work 'node.spec.sign',
-- 'node.command.sign', poked when they change), tick specs as bookings start and end, and re-poke
-- gateways for nodes whose observed generation lags (the reconciler).
SET LOCAL ROLE bc_owner;

INSERT INTO compute.work_periodic (kind, every) VALUES
    ('node_specs.tick',   interval '5 seconds'),
    ('node_specs.resend', interval '10 seconds');

CREATE FUNCTION worker_api.node_specs_tick() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_specs_tick() $$;
COMMENT ON FUNCTION worker_api.node_specs_tick() IS 'Sweep: specs of nodes whose bookings started or ended by time passing.';

CREATE FUNCTION worker_api.node_specs_resend() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_specs_lagging() $$;
COMMENT ON FUNCTION worker_api.node_specs_resend() IS 'Reconciler: poke gateways of nodes whose observed generation lags.';

COMMIT;
