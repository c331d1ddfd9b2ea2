-- Deploy better_compute:node_flags to pg
-- Snapshot of sql/250_node_flags.sql when this change was planned.

BEGIN;

-- Node flags: cordoned, draining, quarantined. Any flag keeps a node out of placement. Draining
-- also waits for the node's current bookings to end: the drain is complete as soon as none is live
-- at compute_now() (ops.nodes derives it, so it completes by itself as time passes), and
-- compute.node_drains_complete() records when (the worker calls it; release and expiry too).
-- Future bookings on a drained node stay: an operator releases or keeps them.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.node_flag_set(p_node_id uuid, p_flag text, p_by text, p_reason text)
RETURNS void
LANGUAGE plpgsql
AS $$
-- Lock order: the node's devices FOR UPDATE (waits for placements in flight on them), so every
-- placement that commits after this flag sees it.
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %s', p_node_id), 'List nodes in ops.nodes.');
    END IF;
    IF p_flag IS NULL OR p_flag NOT IN ('cordoned', 'draining', 'quarantined') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown node flag %L', p_flag), 'Use cordoned, draining or quarantined.');
    END IF;
    IF p_reason IS NULL OR length(p_reason) NOT BETWEEN 1 AND 1000 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a flag needs a reason', 'Say why, in at most 1000 characters.');
    END IF;
    PERFORM 1 FROM compute.devices AS d WHERE d.node_id = p_node_id ORDER BY d.device_id FOR UPDATE;
    INSERT INTO compute.node_flags (node_id, flag, set_by, reason, set_at)
    VALUES (p_node_id, p_flag, coalesce(p_by, 'unknown'), p_reason, compute.compute_now())
    ON CONFLICT (node_id, flag) DO UPDATE SET set_by = EXCLUDED.set_by, reason = EXCLUDED.reason;
    IF p_flag = 'draining' THEN
        PERFORM compute.node_drains_complete();
    END IF;
END
$$;
COMMENT ON FUNCTION compute.node_flag_set(uuid, text, text, text) IS 'Set a node flag (who and why recorded); the node gets no new placements.';

CREATE FUNCTION compute.node_flag_clear(p_node_id uuid, p_flag text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no node %s', p_node_id), 'List nodes in ops.nodes.');
    END IF;
    DELETE FROM compute.node_flags WHERE node_id = p_node_id AND flag = p_flag;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION compute.node_flag_clear(uuid, text) IS 'Clear a node flag; false when it was not set.';

CREATE FUNCTION compute.node_drains_complete()
RETURNS integer
LANGUAGE sql
AS $$
    WITH done AS (
        UPDATE compute.node_flags AS f SET completed_at = compute.compute_now()
         WHERE f.flag = 'draining' AND f.completed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM compute.bookings AS b
                            WHERE b.node_id = f.node_id AND b.state IN ('provisional', 'active')
                              AND b.during @> compute.compute_now())
        RETURNING 1)
    SELECT count(*)::integer FROM done
$$;
COMMENT ON FUNCTION compute.node_drains_complete() IS 'Record completed drains (no live booking at compute_now()); returns how many completed.';

COMMIT;
