-- Deploy better_compute:node_sessions to pg
-- Node sessions (epoch, gateway, last heard); ops.nodes shows connected and the age since last heard.

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE TABLE compute.node_sessions (
    node_id       uuid PRIMARY KEY REFERENCES compute.nodes ON DELETE CASCADE,
    epoch         bigint NOT NULL CHECK (epoch > 0),
    gateway       text NOT NULL CHECK (length(gateway) BETWEEN 1 AND 200),
    opened_at     timestamptz NOT NULL,
    last_heard_at timestamptz NOT NULL,
    closed_at     timestamptz
);
COMMENT ON TABLE compute.node_sessions IS 'The current session of each node: its epoch (fencing token), gateway, when last heard.';

CREATE OR REPLACE VIEW ops.nodes AS
    SELECT n.node_id, n.name, s.name AS site, p.name AS pool, p.gpu_model,
           (SELECT count(*) FROM compute.devices AS d WHERE d.node_id = n.node_id AND d.present) AS gpus,
           (SELECT pg_catalog.array_agg(f.flag ORDER BY f.flag) FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flags,
           CASE WHEN NOT EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id AND f.flag = 'draining') THEN NULL
                WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                              WHERE b.node_id = n.node_id AND b.state IN ('provisional', 'active')
                                AND b.during @> ops.now()) THEN 'draining'
                ELSE 'drained' END AS drain,
           (SELECT pg_catalog.jsonb_object_agg(f.flag, pg_catalog.jsonb_build_object('by', f.set_by, 'reason', f.reason, 'at', f.set_at,
                                                                                    'completed_at', f.completed_at))
              FROM compute.node_flags AS f WHERE f.node_id = n.node_id) AS flag_details,
           n.inventory_at, n.created_at,
           coalesce(ns.closed_at IS NULL
                    AND ns.last_heard_at > ops.now() - (SELECT l.value FROM compute.limits AS l WHERE l.name = 'session_timeout_seconds')
                                                       * interval '1 second', false) AS connected,
           round(extract(epoch FROM ops.now() - ns.last_heard_at)::numeric, 1) AS last_heard_seconds
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id
      LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id;
COMMENT ON VIEW ops.nodes IS 'Every node: pool, GPUs present, flags (who, why, when), drain state (draining until no booking is live now), connected and the age since last heard.';

COMMIT;
