-- Deploy better_compute:worker_schedule to pg
-- Snapshot of sql/450_worker_schedule.sql when this change was planned.

BEGIN;

-- What the worker runs periodically (compute.work_periodic), and the sweeps it calls.
SET LOCAL ROLE bc_owner;

INSERT INTO compute.work_periodic (kind, every) VALUES
    ('reservations.expire', interval '5 seconds'),
    ('nodes.drains',        interval '30 seconds'),
    ('outbox.fan_out',      interval '2 seconds'),
    ('outbox.prune',        interval '1 hour'),
    ('usage.export',        interval '1 minute'),
    ('audit.checkpoint',    interval '1 minute'),
    ('work.prune',          interval '1 hour');

CREATE FUNCTION worker_api.reservations_expire() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.reservations_expire() $$;
CREATE FUNCTION worker_api.node_drains_complete() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.node_drains_complete() $$;

COMMIT;
