-- Revert better_compute:ready_means_usable from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP VIEW ops.withdrawals;

DROP VIEW ops.readiness;

DELETE FROM compute.limits WHERE name = 'withdrawal_grace_seconds';

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.booking_readiness(bigint);

DROP FUNCTION compute.bookings_readiness(jsonb);

DROP FUNCTION compute.node_observed(uuid,jsonb);

DROP FUNCTION ops.booking_readiness(bigint);

DROP FUNCTION ops.node_fence(text,text);

CREATE OR REPLACE FUNCTION compute.node_report_apply(p_report_id bigint, p_public_key bytea)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
-- Lock order: the report row, the node's identity row (one verifier per node at a time), then what
-- the report's effect locks (node_register: the node and its devices; node_specs; node_commands).
DECLARE
    v_report   compute.node_reports;
    v_identity compute.node_identities;
    v_body     jsonb;
    v_epoch    bigint;
    v_seq      bigint;
    v_reason   text;
BEGIN
    SELECT * INTO v_report FROM compute.node_reports AS r WHERE r.report_id = p_report_id AND r.state = 'pending' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- decided already
    END IF;
    SELECT * INTO v_identity FROM compute.node_identities AS i WHERE i.node_id = v_report.node_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.node_report_reject(p_report_id, 'the node has no registered key (it never joined)');
        RETURN false;
    END IF;
    IF v_identity.public_key IS DISTINCT FROM p_public_key THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('the key of node %s is not the one the report was verified with', v_report.node_id),
            'Verify the report again with the key worker_api.node_reports_pending answers now.');
    END IF;
    IF EXISTS (SELECT 1 FROM compute.node_reports AS r WHERE r.node_id = v_report.node_id AND r.state = 'pending'
                  AND (r.epoch, r.report_id) < (v_report.epoch, v_report.report_id)) THEN
        PERFORM compute.raise_error('GENERATION_CONFLICT', pg_catalog.format('an earlier report of node %s is still pending', v_report.node_id),
            'Decide the node''s reports in the order worker_api.node_reports_pending answers them.');
    END IF;
    v_body := v_report.envelope -> 'body';
    -- The body binds the node, the session it was sent under and its place in that session.
    IF v_body ->> 'node_id' IS DISTINCT FROM v_report.node_id::text THEN
        v_reason := 'the report names another node';
    ELSIF pg_catalog.jsonb_typeof(v_body -> 'epoch') IS DISTINCT FROM 'number' OR pg_catalog.jsonb_typeof(v_body -> 'seq') IS DISTINCT FROM 'number'
          OR (v_body ->> 'epoch') !~ '^[0-9]{1,18}$' OR (v_body ->> 'seq') !~ '^[0-9]{1,18}$' THEN
        v_reason := 'the report needs an integer epoch and seq';
    ELSE
        v_epoch := (v_body ->> 'epoch')::bigint;
        v_seq := (v_body ->> 'seq')::bigint;
        IF v_epoch <> v_report.epoch THEN
            v_reason := pg_catalog.format('the report was signed in session epoch %s and relayed in epoch %s', v_epoch, v_report.epoch);
        ELSIF (v_epoch, v_seq) <= (v_identity.report_epoch, v_identity.report_seq) THEN
            v_reason := pg_catalog.format('replayed or out of order: (epoch %s, seq %s) is not after (%s, %s), the last report applied',
                                          v_epoch, v_seq, v_identity.report_epoch, v_identity.report_seq);
        END IF;
    END IF;
    IF v_reason IS NULL THEN
        UPDATE compute.node_identities SET report_epoch = v_epoch, report_seq = v_seq WHERE node_id = v_report.node_id;
        BEGIN
            CASE v_report.envelope ->> 'purpose'
                WHEN 'node.inventory' THEN
                    PERFORM compute.node_inventory_reported(v_report.node_id, v_body -> 'inventory');
                WHEN 'node.observed' THEN
                    PERFORM compute.node_spec_observed(v_report.node_id, compute.report_bigint(v_body, 'generation'), v_body -> 'conditions');
                WHEN 'node.result' THEN
                    PERFORM compute.node_command_result(v_report.node_id, compute.report_uuid(v_body, 'command_id'),
                                                        v_body ->> 'status', v_body ->> 'output');
                WHEN 'node.key' THEN
                    PERFORM compute.node_key_replace(v_report.node_id, compute.report_base64(v_body, 'public_key'));
                ELSE
                    PERFORM compute.raise_error('UNSUPPORTED', pg_catalog.format('no report of purpose %L', pg_catalog.left(v_report.envelope ->> 'purpose', 64)),
                        'A node reports node.inventory, node.observed, node.result or node.key.');
            END CASE;
        EXCEPTION WHEN OTHERS THEN
            -- A contract error (what the node said is invalid) rejects the report; any other error
            -- (a deadlock, the database restarting) fails the worker's run, which tries again.
            IF pg_catalog.left(SQLSTATE, 2) <> 'BC' THEN
                RAISE;
            END IF;
            v_reason := SQLERRM;
        END;
    END IF;
    IF v_reason IS NOT NULL THEN
        PERFORM compute.node_report_reject(p_report_id, v_reason);
        RETURN false;
    END IF;
    DELETE FROM compute.node_reports WHERE report_id = p_report_id;
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION compute.node_spec_document(p_node_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    -- What the node should expose at compute_now: each atom of an active booking that holds now; a
    -- MIG atom with the UUID of the MIG device it is, which the daemon checks against its own
    -- inventory with the profile and placement (a null cdi_name: not exposed, a condition).
    -- And per present GPU, the layout valid now and since when; for a MIG-capable GPU the MIG mode
    -- and GPU instances (profile@placement) it must have, which the daemon converges (issue 13).
    RETURN pg_catalog.jsonb_build_object('node_id', p_node_id,
        'devices', (SELECT coalesce(pg_catalog.jsonb_agg(
                       pg_catalog.jsonb_build_object('device_uuid', x.uuid, 'index', x.index, 'kind', x.kind, 'profile', x.profile,
                           'placement', x.placement, 'slot', x.slot, 'cdi_name', compute.cdi_name(x.kind, x.uuid, x.mig_uuid),
                           'mig_uuid', x.mig_uuid, 'reservation_id', x.reservation_id, 'until', x.until)
                       ORDER BY x.index, x.placement, x.slot), '[]')
              FROM (SELECT d.uuid, d.index, a.kind, a.profile, a.placement, a.slot, b.reservation_id, upper(b.during) AS until,
                           CASE WHEN a.kind = 'mig' THEN compute.inventory_mig_uuid(n.inventory, d.uuid, a.profile, a.placement) END
                               AS mig_uuid
                      FROM compute.bookings AS b
                      JOIN compute.atoms AS a ON a.atom_id = b.atom_id
                      JOIN compute.devices AS d ON d.device_id = b.device_id
                      JOIN compute.nodes AS n ON n.node_id = b.node_id
                     WHERE b.node_id = p_node_id AND b.state = 'active' AND b.during @> v_now
                    OFFSET 0) AS x),  -- OFFSET 0: the subquery stays one, so mig_uuid is computed once per row
        'gpus', (SELECT coalesce(pg_catalog.jsonb_agg(
                    pg_catalog.jsonb_build_object('uuid', d.uuid, 'index', d.index, 'layout', l.layout, 'since', l.since,
                        'mig', CASE WHEN d.mig_supported THEN pg_catalog.jsonb_build_object(
                                   'mode', CASE WHEN l.layout LIKE 'mig:%' THEN 'enabled' ELSE 'disabled' END,
                                   'instances', CASE WHEN l.layout LIKE 'mig:%' THEN
                                       (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                   'profile', pg_catalog.split_part(i, '@', 1),
                                                   'placement', pg_catalog.split_part(i, '@', 2)::integer))
                                          FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.substr(l.layout, 5), ',')) AS i)
                                       ELSE '[]'::jsonb END) END)
                    ORDER BY d.index), '[]')
              FROM compute.devices AS d
              CROSS JOIN LATERAL compute.device_layout_at(d.device_id, v_now) AS l
             WHERE d.node_id = p_node_id AND d.present));
END
$function$;

COMMENT ON FUNCTION compute.node_spec_document(uuid) IS 'The desired state of a node now: the atoms it must expose and to which reservation, and each GPU''s layout (MIG mode and instances).';

CREATE OR REPLACE FUNCTION compute.node_spec_refresh(p_node_id uuid)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
-- Lock order: the node's spec row first, then the document is computed by a later statement,
-- whose snapshot (READ COMMITTED) sees every change committed before the lock was granted: two
-- concurrent refreshes cannot store a document that misses the other's change.
DECLARE
    v_spec       compute.node_specs;
    v_document   jsonb;
    v_generation bigint;
BEGIN
    INSERT INTO compute.node_specs (node_id, generation, spec, changed_at)
    VALUES (p_node_id, 1, pg_catalog.jsonb_build_object('node_id', p_node_id, 'devices', '[]'::jsonb), compute.compute_now())
    ON CONFLICT (node_id) DO NOTHING;
    SELECT * INTO v_spec FROM compute.node_specs AS s WHERE s.node_id = p_node_id FOR UPDATE;
    v_document := compute.node_spec_document(p_node_id);
    v_generation := v_spec.generation;
    IF v_document IS DISTINCT FROM v_spec.spec THEN
        UPDATE compute.node_specs SET generation = generation + 1, spec = v_document, changed_at = compute.compute_now()
         WHERE node_id = p_node_id RETURNING generation INTO v_generation;
        -- A GPU whose MIG layout changes is not converged until its node says so for this generation
        -- or a later one (placement leaves it out meanwhile): only on a node whose daemon
        -- acknowledges specs, and for a GPU the previous spec already listed.
        IF v_spec.observed_generation IS NOT NULL THEN
            INSERT INTO compute.device_conditions AS x (device_id, type, status, reason, message, generation, set_by, since, reported_at)
            SELECT d.device_id, 'MigConverged', false, 'LayoutChanged',
                   pg_catalog.format('layout %s holds from %s: waiting for the node to converge', g ->> 'layout', g ->> 'since'),
                   v_generation, 'control-plane', compute.compute_now(), compute.compute_now()
              FROM pg_catalog.jsonb_array_elements(v_document -> 'gpus') AS g
              JOIN pg_catalog.jsonb_array_elements(coalesce(v_spec.spec -> 'gpus', '[]')) AS o ON o ->> 'uuid' = g ->> 'uuid'
              JOIN compute.devices AS d ON d.uuid = g ->> 'uuid'
             WHERE g -> 'mig' IS DISTINCT FROM o -> 'mig' AND pg_catalog.jsonb_typeof(g -> 'mig') = 'object'
             ORDER BY d.device_id
            ON CONFLICT ON CONSTRAINT device_conditions_pkey DO UPDATE
                SET status = false, reason = EXCLUDED.reason, message = EXCLUDED.message, generation = EXCLUDED.generation,
                    set_by = EXCLUDED.set_by, reported_at = EXCLUDED.reported_at,
                    since = CASE WHEN x.status THEN EXCLUDED.since ELSE x.since END;
        END IF;
    END IF;
    IF v_spec.signed_generation IS DISTINCT FROM v_generation THEN
        PERFORM compute.work_poke('node.spec.sign', p_node_id::text);
    END IF;
    RETURN v_generation;
END
$function$;

CREATE OR REPLACE FUNCTION compute.reservation_document(p_reservation_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    RETURN (SELECT pg_catalog.jsonb_build_object(
        'reservation_id', r.reservation_id, 'tenant_id', r.tenant_id, 'project_id', r.project_id,
        'pool_id', r.pool_id, 'shape', r.shape, 'count', r.count, 'state', r.state,
        'phase', CASE WHEN r.state NOT IN ('provisional', 'active') THEN 'ended'
                      WHEN upper(r.during) <= v_now THEN 'ended'
                      WHEN lower(r.during) > v_now THEN 'upcoming' ELSE 'running' END,
        'start', lower(r.during), 'end', upper(r.during), 'same_node', r.same_node,
        'expires_at', r.expires_at, 'hold_until', r.hold_until, 'created_at', r.created_at,
        'ended_at', r.ended_at, 'end_reason', r.end_reason,
        'bookings', coalesce((
            SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                       'atom_id', a.atom_id, 'node', n.name, 'device_uuid', d.uuid, 'kind', a.kind,
                       'profile', a.profile, 'placement', a.placement, 'slot', a.slot,
                       'cdi_name', compute.atom_cdi_name(a.atom_id), 'state', b.state,
                       'conditions', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                                 'type', c.type, 'status', c.status, 'critical', c.critical, 'reason', c.reason,
                                                 'message', c.message, 'since', c.since) ORDER BY c.type), '[]')
                                        FROM compute.device_conditions AS c WHERE c.device_id = d.device_id))
                   ORDER BY n.name, d.index, a.placement, a.slot)
              FROM compute.bookings AS b
              JOIN compute.atoms AS a ON a.atom_id = b.atom_id
              JOIN compute.devices AS d ON d.device_id = b.device_id
              JOIN compute.nodes AS n ON n.node_id = b.node_id
             WHERE b.reservation_id = r.reservation_id), '[]'))
      FROM compute.reservations AS r
     WHERE r.reservation_id = p_reservation_id);
END
$function$;

COMMENT ON TABLE compute.node_grants IS NULL;

DROP TABLE compute.node_grants;

COMMIT;
