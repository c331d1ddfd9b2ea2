-- Fleet gauges (docs/architecture.md §15, docs/operations.md): what Prometheus reads about the whole fleet,
-- in one function, so every exporter says the same and the rules live here (P4). The worker serves them
-- on its /metrics (worker_api.fleet_metrics); operators read the same rows at psql (ops.fleet_metrics).
--
-- Bounded cost (P12): every part reads live rows only, through the partial indexes that the queue, the
-- deliveries and the admissions already have (work_live_key, webhook_deliveries_event,
-- admissions_pending), the fleet's devices and the bookings live now; pools and work kinds are cut at
-- metric_label_values. No row is locked; the exporter caches the answer and calls it under a statement
-- timeout (worker/metrics.py).
--
-- One row per series: metric (a Prometheus name), help, labels (a flat object of strings), value.
SET LOCAL ROLE bc_owner;

CREATE FUNCTION compute.fleet_metrics()
RETURNS TABLE (metric text, help text, labels jsonb, value double precision)
LANGUAGE sql STABLE
AS $$
    WITH now_ AS (
        SELECT compute.compute_now() AS t,
               compute.limit('metric_label_values') AS label_values,
               compute.limit('session_timeout_seconds') * interval '1 second' AS silence
    ), pools AS (
        SELECT p.pool_id, s.name || '/' || p.name AS pool
          FROM compute.pools AS p JOIN compute.sites AS s ON s.site_id = p.site_id
         ORDER BY s.name, p.name
         LIMIT (SELECT now_.label_values FROM now_)
    ), gpu_states AS (
        -- Each physical GPU once, in the first state that applies; counted once per pool and state.
        SELECT n.pool_id,
               CASE WHEN NOT d.present THEN 'absent'
                    WHEN EXISTS (SELECT 1 FROM compute.bookings AS b
                                  WHERE b.device_id = d.device_id AND b.site_id = d.site_id
                                    AND b.state = 'held' AND b.during @> now_.t) THEN 'held'
                    WHEN EXISTS (SELECT 1 FROM compute.node_flags AS f WHERE f.node_id = n.node_id) THEN 'flagged'
                    WHEN EXISTS (SELECT 1 FROM compute.device_conditions AS c
                                  WHERE c.device_id = d.device_id AND c.critical) THEN 'unhealthy'
                    WHEN ns.closed_at IS NOT NULL OR ns.last_heard_at IS NULL
                         OR ns.last_heard_at <= now_.t - now_.silence THEN 'disconnected'
                    ELSE 'free' END AS state
          FROM now_, compute.devices AS d
          JOIN compute.nodes AS n ON n.node_id = d.node_id
          LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
    ), gpu_counts AS (
        SELECT g.pool_id, g.state, count(*) AS n FROM gpu_states AS g GROUP BY g.pool_id, g.state
    ), node_sessions AS (
        SELECT n.pool_id,
               CASE WHEN ns.node_id IS NULL THEN 'never'
                    WHEN ns.closed_at IS NOT NULL THEN 'closed'
                    WHEN ns.last_heard_at <= now_.t - now_.silence THEN 'silent'
                    ELSE 'connected' END AS session
          FROM now_, compute.nodes AS n
          LEFT JOIN compute.node_sessions AS ns ON ns.node_id = n.node_id
    ), session_counts AS (
        SELECT x.pool_id, x.session, count(*) AS n FROM node_sessions AS x GROUP BY x.pool_id, x.session
    ), kinds AS (
        SELECT w.kind, w.state, count(*) AS items,
               max(now_.t - w.run_at) FILTER (WHERE w.state = 'pending' AND w.run_at <= now_.t) AS overdue
          FROM now_, compute.work AS w
         WHERE w.state IN ('pending', 'running')
         GROUP BY w.kind, w.state
    )
    -- GPUs by state per pool: every pool has every state, zero included, so a rule sees a pool empty.
    SELECT 'bc_fleet_gpus', 'Physical GPUs by pool and state (absent, held now in whole or part, on a flagged node, unhealthy, '
                            'on a disconnected node, free).',
           pg_catalog.jsonb_build_object('pool', p.pool, 'state', st.state), coalesce(c.n, 0)::double precision
      FROM pools AS p
     CROSS JOIN unnest(ARRAY['absent', 'held', 'flagged', 'unhealthy', 'disconnected', 'free']) AS st(state)
      LEFT JOIN gpu_counts AS c ON c.pool_id = p.pool_id AND c.state = st.state
    UNION ALL
    SELECT 'bc_fleet_nodes', 'Nodes by pool and session (connected, silent past session_timeout_seconds, closed, never opened).',
           pg_catalog.jsonb_build_object('pool', p.pool, 'session', se.session), coalesce(c.n, 0)::double precision
      FROM pools AS p
     CROSS JOIN unnest(ARRAY['connected', 'silent', 'closed', 'never']) AS se(session)
      LEFT JOIN session_counts AS c ON c.pool_id = p.pool_id AND c.session = se.session
    UNION ALL
    SELECT 'bc_fleet_admissions_pending', 'Admissions prepared and not yet decided (provisional rows held).',
           '{}'::jsonb, (SELECT count(*) FROM compute.admissions AS a WHERE a.state = 'pending')::double precision
    UNION ALL
    SELECT 'bc_fleet_admissions_pending_oldest_seconds', 'Age of the oldest undecided admission (0 when none).',
           '{}'::jsonb,
           coalesce((SELECT extract(epoch FROM now_.t - min(a.created_at)) FROM compute.admissions AS a
                      WHERE a.state = 'pending'), 0)::double precision
      FROM now_
    UNION ALL
    SELECT 'bc_fleet_work_items', 'Live work items by kind and state (pending, running).',
           pg_catalog.jsonb_build_object('kind', k.kind, 'state', k.state), k.items::double precision
      FROM (SELECT * FROM kinds ORDER BY kind, state LIMIT (SELECT now_.label_values FROM now_)) AS k
    UNION ALL
    SELECT 'bc_fleet_work_overdue_seconds', 'How long the most overdue pending item of a kind has been due (0: none due).',
           pg_catalog.jsonb_build_object('kind', k.kind),
           coalesce(extract(epoch FROM k.overdue), 0)::double precision
      FROM (SELECT * FROM kinds WHERE state = 'pending' ORDER BY kind LIMIT (SELECT now_.label_values FROM now_)) AS k
    UNION ALL
    SELECT 'bc_fleet_webhook_deliveries_pending', 'Webhook deliveries not yet delivered nor dead (the backlog).',
           '{}'::jsonb, (SELECT count(*) FROM compute.webhook_deliveries AS d WHERE d.state = 'pending')::double precision
    UNION ALL
    SELECT 'bc_fleet_webhook_deliveries_pending_oldest_seconds', 'Age of the oldest pending webhook delivery (0 when none).',
           '{}'::jsonb,
           coalesce((SELECT extract(epoch FROM now_.t - min(d.created_at)) FROM compute.webhook_deliveries AS d
                      WHERE d.state = 'pending'), 0)::double precision
      FROM now_
$$;
COMMENT ON FUNCTION compute.fleet_metrics() IS 'Fleet gauges, one row per series (metric, help, labels, value): GPUs by pool and state, nodes by session, pending admissions, live work by kind, the webhook backlog. Bounded: live rows through partial indexes, pools and kinds cut at metric_label_values.';

CREATE FUNCTION worker_api.fleet_metrics()
RETURNS TABLE (metric text, help text, labels jsonb, value double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.fleet_metrics() $$;
COMMENT ON FUNCTION worker_api.fleet_metrics() IS 'The fleet gauges the worker serves on /metrics (compute.fleet_metrics).';

CREATE FUNCTION ops.fleet_metrics()
RETURNS TABLE (metric text, help text, labels jsonb, value double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.fleet_metrics() $$;
COMMENT ON FUNCTION ops.fleet_metrics() IS 'The fleet gauges Prometheus reads from the worker, as rows (compute.fleet_metrics).';
