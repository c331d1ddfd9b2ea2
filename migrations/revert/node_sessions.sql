-- Revert better_compute:node_sessions from pg

BEGIN;

SET LOCAL ROLE bc_owner;

DROP VIEW ops.nodes CASCADE;
CREATE VIEW ops.nodes AS
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
           n.inventory_at, n.created_at
      FROM compute.nodes AS n
      JOIN compute.pools AS p ON p.pool_id = n.pool_id
      JOIN compute.sites AS s ON s.site_id = n.site_id;
COMMENT ON VIEW ops.nodes IS 'Every node: pool, GPUs present, flags (who, why, when) and drain state (draining until no booking is live now).';
DROP TABLE compute.node_sessions;

COMMIT;
