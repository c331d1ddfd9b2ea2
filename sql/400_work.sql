-- The work queue (docs/architecture.md §9, P1, P3, P12): reconciler work for workers, in PostgreSQL.
--
-- One row per (kind, key) while it is live (pending or running): a second poke for the same key
-- does not add a row. A poke that arrives while the item runs sets `repoke`, and the item goes
-- back to pending when it completes, so a change made during a run is never lost (level-triggered
-- handlers look at the state again). Workers claim items FOR UPDATE SKIP LOCKED with a lease; each
-- claim bumps `lease_epoch`, and complete / fail / extend succeed only with the current epoch: a
-- worker whose lease expired and was reclaimed gets FENCED and changes nothing. Failures back off
-- exponentially with jitter; past max_attempts an item is dead (ops.work_dead) until an operator
-- retries it. Periodic kinds (compute.work_periodic) go back to pending `every` after completing.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.work (
    work_id          bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT work_pkey PRIMARY KEY,
    kind             text NOT NULL CONSTRAINT work_kind_check CHECK (kind ~ '^[a-z][a-z0-9_.]{0,62}$'),
    key              text NOT NULL CONSTRAINT work_key_check CHECK (length(key) BETWEEN 1 AND 200),
    payload          jsonb NOT NULL DEFAULT '{}',
    priority         integer NOT NULL DEFAULT 0,
    state            text NOT NULL CONSTRAINT work_state_check CHECK (state IN ('pending', 'running', 'done', 'dead')),
    repoke           boolean NOT NULL DEFAULT false,
    run_at           timestamptz NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL CONSTRAINT work_max_attempts_check CHECK (max_attempts > 0),
    lease_owner      text,
    lease_epoch      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT work_running_has_lease CHECK ((state = 'running') = (lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL)),
    CONSTRAINT work_payload_check CHECK (pg_catalog.octet_length(payload::text) <= 16384)
);
CREATE UNIQUE INDEX work_live_key ON compute.work (kind, key) WHERE state IN ('pending', 'running');
-- work_claim walks this index in claim order and stops after its batch: claims cost the same with
-- 20,000 items queued as with 20 (running items are few: at most the workers' concurrency).
CREATE INDEX work_claim_order ON compute.work (priority DESC, run_at, work_id) WHERE state IN ('pending', 'running');
CREATE INDEX work_leases ON compute.work (lease_expires_at) WHERE state = 'running';
COMMENT ON TABLE compute.work IS 'Reconciler work: one live row per (kind, key), leased to one worker at a time.';

CREATE TABLE compute.work_periodic (
    kind  text CONSTRAINT work_periodic_pkey PRIMARY KEY CONSTRAINT work_periodic_kind_check CHECK (kind ~ '^[a-z][a-z0-9_.]{0,62}$'),
    every interval NOT NULL CONSTRAINT work_periodic_every_check CHECK (every > interval '0')
);
COMMENT ON TABLE compute.work_periodic IS 'Kinds that run again `every` after they complete (sweeps, exports, checkpoints).';

-- Content-free wake-ups (bc_work, bc_outbox) are hints, sent at commit by one transaction at a
-- time. NOTIFY takes a cluster-wide lock at commit and holds it through the commit's WAL flush, so
-- transactions that all notify commit one after another. compute.wake_at_commit runs as a deferred
-- constraint trigger, i.e. as its transaction commits: it tries an advisory lock (never waits for
-- it), held to the end of the transaction like NOTIFY's; the transaction that gets it notifies, one
-- that finds it taken is committing alongside the holder and skips. Listeners re-read after each
-- notification and once more a moment later (the skipper may finish its commit just after the
-- holder), and poll besides, so a skipped hint only delays (P1). The lock is taken last, at commit,
-- and never waited for: it is outside the lock order.
CREATE FUNCTION compute.wake_at_commit()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended('notify-gate', 0)) THEN
        PERFORM pg_catalog.pg_notify(TG_ARGV[0], '');  -- identical notifications of one transaction are sent once
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.wake_at_commit() IS
    'Deferred trigger: content-free NOTIFY on channel TG_ARGV[0] at commit, unless another committing transaction holds the wake-up gate.';
-- Work that can be claimed now or later (poked, retried, back to pending) wakes workers at commit.
CREATE CONSTRAINT TRIGGER work_wake AFTER INSERT OR UPDATE OF state, run_at ON compute.work DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION compute.wake_at_commit('bc_work');

CREATE FUNCTION compute.work_poke(p_kind text, p_key text, p_payload jsonb DEFAULT '{}', p_run_at timestamptz DEFAULT NULL,
                                  p_priority integer DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := compute.compute_now();
    v_work_id bigint;
BEGIN
    IF p_kind IS NULL OR p_kind !~ '^[a-z][a-z0-9_.]{0,62}$' OR p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid work kind %L or key %L', p_kind, p_key),
            'A kind is lower-case letters, digits, "_" and "."; a key is 1-200 characters.');
    END IF;
    -- Coalesce: an item already pending for the key runs once, as early and as urgently as asked;
    -- one already running is flagged to run again when it completes.
    INSERT INTO compute.work AS w (kind, key, payload, priority, state, run_at, max_attempts, created_at, updated_at)
    VALUES (p_kind, p_key, coalesce(p_payload, '{}'), p_priority, 'pending', coalesce(p_run_at, v_now),
            compute.limit('work_attempts'), v_now, v_now)
    ON CONFLICT (kind, key) WHERE state IN ('pending', 'running') DO UPDATE
        SET payload = EXCLUDED.payload,
            priority = greatest(w.priority, EXCLUDED.priority),
            run_at = CASE WHEN w.state = 'pending' THEN least(w.run_at, EXCLUDED.run_at) ELSE w.run_at END,
            repoke = w.state = 'running',
            updated_at = v_now
    RETURNING w.work_id INTO v_work_id;
    RETURN v_work_id;
END
$$;
COMMENT ON FUNCTION compute.work_poke(text, text, jsonb, timestamptz, integer) IS
    'Queue work for (kind, key), coalesced with live work for the same key; bc_work is notified at commit (work_wake).';

CREATE TYPE compute.work_claim AS (work_id bigint, kind text, key text, payload jsonb, attempts integer, lease_epoch bigint,
                                   lease_expires_at timestamptz);

CREATE FUNCTION compute.work_claim(p_owner text, p_limit integer, p_lease interval, p_kinds text[] DEFAULT NULL)
RETURNS SETOF compute.work_claim
LANGUAGE plpgsql
AS $$
-- Lock order: work rows, FOR UPDATE SKIP LOCKED (never waits for another worker).
DECLARE
    v_now timestamptz := compute.compute_now();
BEGIN
    IF p_owner IS NULL OR p_limit IS NULL OR p_limit < 1 OR p_limit > compute.limit('work_claim_batch')
       OR p_lease IS NULL OR p_lease <= interval '0' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'work_claim needs an owner, a batch size and a positive lease',
            pg_catalog.format('Claim 1 to %s items (limit work_claim_batch).', compute.limit('work_claim_batch')));
    END IF;
    -- A lease that expired on an item out of attempts makes it dead instead of claimable.
    UPDATE compute.work AS w
       SET state = 'dead', lease_owner = NULL, lease_expires_at = NULL, updated_at = v_now,
           last_error = coalesce(w.last_error || E'\n', '') || 'lease expired on the last attempt'
     WHERE w.state = 'running' AND w.lease_expires_at <= v_now AND w.attempts >= w.max_attempts;

    RETURN QUERY
    WITH claimable AS (
        SELECT w.work_id FROM compute.work AS w
         WHERE ((w.state = 'pending' AND w.run_at <= v_now) OR (w.state = 'running' AND w.lease_expires_at <= v_now))
           AND (p_kinds IS NULL OR w.kind = ANY (p_kinds))
         ORDER BY w.priority DESC, w.run_at, w.work_id
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE compute.work AS w
       SET state = 'running', lease_owner = p_owner, lease_epoch = w.lease_epoch + 1, lease_expires_at = v_now + p_lease,
           attempts = w.attempts + 1, updated_at = v_now
      FROM claimable AS c
     WHERE w.work_id = c.work_id
    RETURNING w.work_id, w.kind, w.key, w.payload, w.attempts, w.lease_epoch, w.lease_expires_at;
END
$$;
COMMENT ON FUNCTION compute.work_claim(text, integer, interval, text[]) IS
    'Claim up to p_limit due items (or items whose lease expired) for p_lease; each claim bumps lease_epoch.';

CREATE FUNCTION compute.work_fenced(p_work_id bigint, p_epoch bigint)
RETURNS compute.work
LANGUAGE plpgsql
AS $$
DECLARE
    v_work compute.work;
BEGIN
    SELECT * INTO v_work FROM compute.work AS w WHERE w.work_id = p_work_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no work item %s', p_work_id), 'Claim work with work_claim.');
    END IF;
    IF v_work.state <> 'running' OR v_work.lease_epoch <> p_epoch THEN
        PERFORM compute.raise_error('FENCED',
            pg_catalog.format('work item %s: lease epoch %s is not current (%s, %s)', p_work_id, p_epoch, v_work.lease_epoch, v_work.state),
            'Another worker took this item over after the lease expired: drop the result and claim again.');
    END IF;
    RETURN v_work;
END
$$;
COMMENT ON FUNCTION compute.work_fenced(bigint, bigint) IS 'The running item, locked, when p_epoch is its current lease epoch; FENCED otherwise.';

CREATE FUNCTION compute.work_complete(p_work_id bigint, p_epoch bigint, p_again_at timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_work  compute.work := compute.work_fenced(p_work_id, p_epoch);
    v_now   timestamptz := compute.compute_now();
    v_again timestamptz;
BEGIN
    -- Run again: now if poked while running, else when the handler asked, else after the period.
    SELECT CASE WHEN v_work.repoke THEN v_now ELSE coalesce(p_again_at, v_now + p.every) END INTO v_again
      FROM (SELECT NULL) AS x LEFT JOIN compute.work_periodic AS p ON p.kind = v_work.kind;
    UPDATE compute.work
       SET state = CASE WHEN v_again IS NULL THEN 'done' ELSE 'pending' END,
           run_at = coalesce(v_again, run_at),
           attempts = 0, repoke = false, lease_owner = NULL, lease_expires_at = NULL, last_error = NULL, updated_at = v_now
     WHERE work_id = p_work_id;
END
$$;
COMMENT ON FUNCTION compute.work_complete(bigint, bigint, timestamptz) IS
    'Done, or pending again (now if poked meanwhile, else at p_again_at, else after its period); FENCED with a stale epoch.';

CREATE FUNCTION compute.work_fail(p_work_id bigint, p_epoch bigint, p_error text)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_work  compute.work := compute.work_fenced(p_work_id, p_epoch);
    v_now   timestamptz := compute.compute_now();
    v_delay double precision;
BEGIN
    -- Exponential backoff with jitter: base * 2^(attempts-1), capped, times a random 50-100 %.
    v_delay := least(compute.limit('work_backoff_cap_seconds'),
                     compute.limit('work_backoff_base_seconds') * 2 ^ greatest(v_work.attempts - 1, 0))
               * (0.5 + pg_catalog.random() / 2);
    UPDATE compute.work
       SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
           run_at = v_now + v_delay * interval '1 second',
           last_error = pg_catalog.left(p_error, 2000), repoke = false,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = v_now
     WHERE work_id = p_work_id;
    RETURN CASE WHEN v_work.attempts >= v_work.max_attempts THEN NULL ELSE v_now + v_delay * interval '1 second' END;
END
$$;
COMMENT ON FUNCTION compute.work_fail(bigint, bigint, text) IS 'Back off and retry (returns when), or dead past max_attempts (returns NULL); FENCED with a stale epoch.';

CREATE FUNCTION compute.work_extend(p_work_id bigint, p_epoch bigint, p_lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_work    compute.work := compute.work_fenced(p_work_id, p_epoch);
    v_expires timestamptz := compute.compute_now() + p_lease;
BEGIN
    IF v_work.lease_expires_at <= compute.compute_now() THEN
        PERFORM compute.raise_error('FENCED', pg_catalog.format('work item %s: the lease expired at %s', p_work_id, v_work.lease_expires_at),
            'Renew leases before they expire; claim the item again.');
    END IF;
    UPDATE compute.work SET lease_expires_at = v_expires, updated_at = compute.compute_now() WHERE work_id = p_work_id;
    RETURN v_expires;
END
$$;
COMMENT ON FUNCTION compute.work_extend(bigint, bigint, interval) IS 'Renew a lease that has not expired; FENCED otherwise.';

CREATE FUNCTION compute.work_ensure_periodic()
RETURNS integer
LANGUAGE sql
AS $$
    -- Every periodic kind has a live item (key 'periodic'); run by every worker loop, cheap when they exist.
    -- A dead one stays dead (ops.work_dead) until an operator retries it: no pile of dead copies.
    WITH made AS (
        INSERT INTO compute.work (kind, key, state, run_at, max_attempts, created_at, updated_at)
        SELECT p.kind, 'periodic', 'pending', compute.compute_now(), compute.limit('work_attempts'),
               compute.compute_now(), compute.compute_now()
          FROM compute.work_periodic AS p
         WHERE NOT EXISTS (SELECT 1 FROM compute.work AS w
                            WHERE w.kind = p.kind AND w.key = 'periodic' AND w.state IN ('pending', 'running', 'dead'))
        ON CONFLICT (kind, key) WHERE state IN ('pending', 'running') DO NOTHING
        RETURNING 1)
    SELECT count(*)::integer FROM made
$$;
COMMENT ON FUNCTION compute.work_ensure_periodic() IS 'Create the item of each periodic kind that has none live or dead.';

CREATE FUNCTION compute.work_prune()
RETURNS integer
LANGUAGE sql
AS $$
    WITH gone AS (
        DELETE FROM compute.work
         WHERE state = 'done' AND updated_at < compute.compute_now() - compute.limit('work_done_retention_seconds') * interval '1 second'
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;
COMMENT ON FUNCTION compute.work_prune() IS 'Delete done work items older than work_done_retention_seconds; returns how many.';

CREATE FUNCTION compute.work_retry(p_work_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE compute.work SET state = 'pending', attempts = 0, run_at = compute.compute_now(), updated_at = compute.compute_now()
     WHERE work_id = p_work_id AND state = 'dead'
       AND NOT EXISTS (SELECT 1 FROM compute.work AS w
                        WHERE (w.kind, w.key) = (SELECT d.kind, d.key FROM compute.work AS d WHERE d.work_id = p_work_id)
                          AND w.state IN ('pending', 'running'));
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no dead work item %s without live work for its key', p_work_id),
            'List dead items in ops.work_dead; an item whose key has live work is already being retried.');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.work_retry(bigint) IS 'Operator: put a dead item back in the queue with fresh attempts.';

-- Workers (bc_worker) call these.
CREATE FUNCTION worker_api.work_claim(p_owner text, p_limit integer, p_lease_seconds double precision, p_kinds text[] DEFAULT NULL)
RETURNS SETOF compute.work_claim
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT * FROM compute.work_claim(p_owner, p_limit, p_lease_seconds * interval '1 second', p_kinds) $$;
CREATE FUNCTION worker_api.work_complete(p_work_id bigint, p_epoch bigint, p_again_in_seconds double precision DEFAULT NULL)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.work_complete(p_work_id, p_epoch, compute.compute_now() + p_again_in_seconds * interval '1 second') $$;
CREATE FUNCTION worker_api.work_fail(p_work_id bigint, p_epoch bigint, p_error text) RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.work_fail(p_work_id, p_epoch, p_error) $$;
CREATE FUNCTION worker_api.work_extend(p_work_id bigint, p_epoch bigint, p_lease_seconds double precision) RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.work_extend(p_work_id, p_epoch, p_lease_seconds * interval '1 second') $$;
CREATE FUNCTION worker_api.work_poke(p_kind text, p_key text, p_payload jsonb DEFAULT '{}', p_delay_seconds double precision DEFAULT 0)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = ''
AS $$ SELECT compute.work_poke(p_kind, p_key, p_payload, compute.compute_now() + p_delay_seconds * interval '1 second') $$;
CREATE FUNCTION worker_api.work_ensure_periodic() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.work_ensure_periodic() $$;
CREATE FUNCTION worker_api.work_prune() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.work_prune() $$;

-- Operators see the queue and retry dead items.
CREATE VIEW ops.work AS
    SELECT w.work_id, w.kind, w.key, w.state, w.priority, w.run_at, w.attempts, w.max_attempts, w.lease_owner,
           w.lease_epoch, w.lease_expires_at, w.repoke, w.last_error, w.updated_at
      FROM compute.work AS w WHERE w.state IN ('pending', 'running', 'dead');
COMMENT ON VIEW ops.work IS 'Live and dead work items.';
COMMENT ON COLUMN ops.work.work_id IS 'The work item.';
COMMENT ON COLUMN ops.work.kind IS 'What it does (webhook.deliver, …).';
COMMENT ON COLUMN ops.work.key IS 'What it is about; one live item per kind and key.';
COMMENT ON COLUMN ops.work.state IS 'pending, running or dead.';
COMMENT ON COLUMN ops.work.priority IS 'Higher runs first.';
COMMENT ON COLUMN ops.work.run_at IS 'Not before this time.';
COMMENT ON COLUMN ops.work.attempts IS 'Attempts so far.';
COMMENT ON COLUMN ops.work.max_attempts IS 'When attempts reach it, the item is dead.';
COMMENT ON COLUMN ops.work.lease_owner IS 'The worker holding it.';
COMMENT ON COLUMN ops.work.lease_epoch IS 'The fencing token of that lease.';
COMMENT ON COLUMN ops.work.lease_expires_at IS 'When the lease lapses unless renewed.';
COMMENT ON COLUMN ops.work.repoke IS 'Whether it runs again after the current run.';
COMMENT ON COLUMN ops.work.last_error IS 'The last failure.';
COMMENT ON COLUMN ops.work.updated_at IS 'Last change.';
CREATE VIEW ops.work_dead AS
    SELECT w.work_id, w.kind, w.key, w.attempts, w.last_error, w.updated_at AS died_at
      FROM compute.work AS w WHERE w.state = 'dead';
COMMENT ON VIEW ops.work_dead IS 'Work items past their attempt bound; ops.work_retry(work_id) queues one again.';
COMMENT ON COLUMN ops.work_dead.work_id IS 'The item: ops.work_retry(work_id) queues it again.';
COMMENT ON COLUMN ops.work_dead.kind IS 'What it does.';
COMMENT ON COLUMN ops.work_dead.key IS 'What it is about.';
COMMENT ON COLUMN ops.work_dead.attempts IS 'Attempts it had.';
COMMENT ON COLUMN ops.work_dead.last_error IS 'The last failure.';
COMMENT ON COLUMN ops.work_dead.died_at IS 'When it gave up.';
CREATE FUNCTION ops.work_retry(p_work_id bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.work_retry(p_work_id) $$;
COMMENT ON FUNCTION ops.work_retry(bigint) IS 'Queue a dead work item again with fresh attempts.';
