-- Usage and the ledger (docs/architecture.md §10): usage windows computed from booked time (the `during` ranges,
-- after truncation by release), per reservation per hour, GPU-seconds exact (a MIG instance counts
-- its fraction of the GPU, a slot 1/N). A window is computed, and sent, only once compute_now()
-- has closed it: past hours never change (release truncates to now, extension moves the end),
-- except under a lapsed lease, which the expiry sweep ends at hold_until: such a reservation waits.
-- Each window goes to the ledger with idempotency key usage:{reservation}:{window start}; the
-- ledger keeps one entry per key, so a window sent twice (a worker killed between sending and
-- marking it sent) is billed once.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.usage_windows (
    reservation_id uuid NOT NULL CONSTRAINT usage_windows_reservation_id_fkey REFERENCES compute.reservations,
    window_start   timestamptz NOT NULL,
    tenant_id      uuid NOT NULL,
    project_id     uuid,
    pool_id        uuid NOT NULL,
    shape          text NOT NULL,
    atom_seconds   numeric NOT NULL CONSTRAINT usage_windows_atom_seconds_check CHECK (atom_seconds > 0),
    gpu_seconds    numeric NOT NULL CONSTRAINT usage_windows_gpu_seconds_check CHECK (gpu_seconds > 0),
    ledger_key     text NOT NULL CONSTRAINT usage_windows_ledger_key_key UNIQUE,
    computed_at    timestamptz NOT NULL,
    sent_at        timestamptz,
    CONSTRAINT usage_windows_pkey PRIMARY KEY (reservation_id, window_start)
);
CREATE INDEX usage_windows_unsent ON compute.usage_windows (window_start) WHERE sent_at IS NULL;
COMMENT ON TABLE compute.usage_windows IS 'Booked time per reservation per closed hour; sent to the ledger once (ledger_key).';

CREATE TABLE compute.usage_progress (
    reservation_id uuid CONSTRAINT usage_progress_pkey PRIMARY KEY CONSTRAINT usage_progress_reservation_id_fkey REFERENCES compute.reservations,
    computed_until timestamptz NOT NULL
);
COMMENT ON TABLE compute.usage_progress IS 'Up to where each reservation''s usage windows are computed.';

CREATE TABLE compute.ledger_entries (
    idempotency_key text CONSTRAINT ledger_entries_pkey PRIMARY KEY,
    tenant_id       uuid NOT NULL,
    meter           text NOT NULL,
    quantity        numeric NOT NULL,
    attributes      jsonb NOT NULL,
    recorded_at     timestamptz NOT NULL
);
COMMENT ON TABLE compute.ledger_entries IS 'The local ledger adapter: one entry per idempotency key, never two.';

CREATE FUNCTION compute.usage_compute()
RETURNS integer
LANGUAGE plpgsql
AS $$
-- Lock order: reservation rows FOR UPDATE SKIP LOCKED (a reservation changing right now waits for the next run).
DECLARE
    v_now         timestamptz := compute.compute_now();
    v_closed      timestamptz := pg_catalog.date_trunc('hour', compute.compute_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    v_reservation compute.reservations;
    v_from        timestamptz;
    v_until       timestamptz;
    v_windows     integer := 0;
    v_count       integer;
BEGIN
    FOR v_reservation IN
        SELECT r.* FROM compute.reservations AS r
          LEFT JOIN compute.usage_progress AS p ON p.reservation_id = r.reservation_id
         WHERE r.state IN ('active', 'released', 'expired') AND lower(r.during) < v_closed
           AND coalesce(p.computed_until, '-infinity') < least(upper(r.during), v_closed)
           -- A lapsed lease is about to be ended at hold_until by the expiry sweep, which may lie in
           -- a closed hour: wait for the sweep (or a renewal) rather than bill time it takes back.
           AND NOT coalesce(r.state = 'active' AND r.hold_until <= v_now AND upper(r.during) > r.hold_until, false)
         ORDER BY r.reservation_id
         LIMIT compute.limit('usage_export_batch')
           FOR UPDATE OF r SKIP LOCKED
    LOOP
        SELECT coalesce(p.computed_until, pg_catalog.date_trunc('hour', lower(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
          INTO v_from FROM (SELECT NULL) AS x
          LEFT JOIN compute.usage_progress AS p ON p.reservation_id = v_reservation.reservation_id;
        v_until := least(v_closed, pg_catalog.date_trunc('hour', upper(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                   + CASE WHEN upper(v_reservation.during) = pg_catalog.date_trunc('hour', upper(v_reservation.during) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                          THEN interval '0' ELSE interval '1 hour' END);
        INSERT INTO compute.usage_windows (reservation_id, window_start, tenant_id, project_id, pool_id, shape, atom_seconds,
                                           gpu_seconds, ledger_key, computed_at)
        SELECT v_reservation.reservation_id, h, v_reservation.tenant_id, v_reservation.project_id, v_reservation.pool_id,
               v_reservation.shape, sum(extract(epoch FROM upper(o) - lower(o))), sum(b.gpu_fraction * extract(epoch FROM upper(o) - lower(o))),
               pg_catalog.format('usage:%s:%s', v_reservation.reservation_id, pg_catalog.to_char(h AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:00:00"Z"')),
               v_now
          FROM pg_catalog.generate_series(v_from, v_until - interval '1 hour', interval '1 hour') AS h
          -- held or released bookings of an active, released or expired reservation (the loop's): a
          -- provisional reservation's holds are never billed.
          JOIN compute.bookings AS b ON b.reservation_id = v_reservation.reservation_id AND b.state IN ('held', 'released')
         CROSS JOIN LATERAL (SELECT b.during * tstzrange(h, h + interval '1 hour') AS o) AS overlap
         WHERE NOT isempty(o)
         GROUP BY h
        ON CONFLICT (reservation_id, window_start) DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_windows := v_windows + v_count;
        INSERT INTO compute.usage_progress (reservation_id, computed_until) VALUES (v_reservation.reservation_id, v_until)
        ON CONFLICT (reservation_id) DO UPDATE SET computed_until = EXCLUDED.computed_until;
    END LOOP;
    RETURN v_windows;
END
$$;
COMMENT ON FUNCTION compute.usage_compute() IS 'Compute the usage windows that compute_now() has closed; returns how many were added.';

CREATE FUNCTION compute.ledger_record_local(p_idempotency_key text, p_tenant_id uuid, p_meter text, p_quantity numeric,
                                            p_attributes jsonb)
RETURNS boolean
LANGUAGE sql
AS $$
    -- The local ledger: a key already recorded is acknowledged again and changes nothing.
    WITH recorded AS (
        INSERT INTO compute.ledger_entries (idempotency_key, tenant_id, meter, quantity, attributes, recorded_at)
        VALUES (p_idempotency_key, p_tenant_id, p_meter, p_quantity, coalesce(p_attributes, '{}'), compute.compute_now())
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM recorded)
$$;
COMMENT ON FUNCTION compute.ledger_record_local(text, uuid, text, numeric, jsonb) IS 'Record a ledger entry once per idempotency key; true when it was new.';

CREATE FUNCTION worker_api.usage_compute() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.usage_compute() $$;
CREATE FUNCTION worker_api.usage_unsent(p_limit integer)
RETURNS TABLE (ledger_key text, tenant_id uuid, project_id uuid, reservation_id uuid, pool_id uuid, shape text,
               window_start timestamptz, atom_seconds numeric, gpu_seconds numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$
    SELECT u.ledger_key, u.tenant_id, u.project_id, u.reservation_id, u.pool_id, u.shape, u.window_start, u.atom_seconds, u.gpu_seconds
      FROM compute.usage_windows AS u WHERE u.sent_at IS NULL
     ORDER BY u.window_start, u.ledger_key
     LIMIT least(p_limit, compute.limit('usage_export_batch'))
$$;
CREATE FUNCTION worker_api.usage_mark_sent(p_ledger_keys text[]) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$
    WITH sent AS (UPDATE compute.usage_windows SET sent_at = compute.compute_now()
                   WHERE ledger_key = ANY (p_ledger_keys) AND sent_at IS NULL RETURNING 1)
    SELECT count(*)::integer FROM sent
$$;
CREATE FUNCTION worker_api.ledger_record_local(p_idempotency_key text, p_tenant_id uuid, p_meter text, p_quantity numeric,
                                               p_attributes jsonb) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.ledger_record_local(p_idempotency_key, p_tenant_id, p_meter, p_quantity, p_attributes) $$;

CREATE VIEW ops.usage AS
    SELECT u.tenant_id, u.project_id, u.pool_id, u.shape, u.reservation_id, u.window_start, u.atom_seconds, u.gpu_seconds,
           round(u.gpu_seconds / 3600, 6) AS gpu_hours, u.ledger_key, u.sent_at
      FROM compute.usage_windows AS u;
COMMENT ON VIEW ops.usage IS 'Usage windows (per reservation per hour) and whether the ledger has them.';
COMMENT ON COLUMN ops.usage.tenant_id IS 'The tenant.';
COMMENT ON COLUMN ops.usage.project_id IS 'The project (NULL: none).';
COMMENT ON COLUMN ops.usage.pool_id IS 'The pool.';
COMMENT ON COLUMN ops.usage.shape IS 'The shape reserved.';
COMMENT ON COLUMN ops.usage.reservation_id IS 'The reservation.';
COMMENT ON COLUMN ops.usage.window_start IS 'The hour the window covers.';
COMMENT ON COLUMN ops.usage.atom_seconds IS 'Atom-seconds reserved in it.';
COMMENT ON COLUMN ops.usage.gpu_seconds IS 'GPU-seconds: atom-seconds times each atom''s GPU fraction.';
COMMENT ON COLUMN ops.usage.gpu_hours IS 'gpu_seconds / 3600.';
COMMENT ON COLUMN ops.usage.ledger_key IS 'The ledger''s idempotency key for the window.';
COMMENT ON COLUMN ops.usage.sent_at IS 'When the ledger took it (NULL: not yet).';
