-- Deploy better_compute:clock to pg
-- Snapshot of sql/010_clock.sql when this change was planned.

BEGIN;

-- One clock (P9). compute.compute_now() is the only source of business time in SQL.
--
-- In production it is now(): the start of the current transaction. A test database may pin it or
-- move it, but only after an owner has allowed that with compute.clock_allow_pinning(true): in any
-- other database the bc.now / bc.now_offset settings are ignored, so nobody can fake the time by
-- setting a GUC in their session.
--
-- Pinning is session-scoped by default (it survives COMMIT, like SET); pass p_local => true to
-- make it transaction-scoped (like SET LOCAL).
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.clock_control (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pin_allowed boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE compute.clock_control IS 'One row: whether compute_now() may be pinned or moved (test databases only).';
INSERT INTO compute.clock_control DEFAULT VALUES;

CREATE FUNCTION compute.compute_now()
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN (SELECT c.pin_allowed FROM compute.clock_control AS c)
        THEN coalesce(nullif(pg_catalog.current_setting('bc.now', true), '')::timestamptz, pg_catalog.now())
             + coalesce(nullif(pg_catalog.current_setting('bc.now_offset', true), '')::interval, interval '0')
        ELSE pg_catalog.now()
    END
$$;
COMMENT ON FUNCTION compute.compute_now() IS 'Business time: now(), or the pinned/advanced test clock where pinning is allowed.';

CREATE FUNCTION compute.clock_allow_pinning(p_allowed boolean)
RETURNS void
LANGUAGE sql
AS $$
    UPDATE compute.clock_control SET pin_allowed = p_allowed;
$$;
COMMENT ON FUNCTION compute.clock_allow_pinning(boolean) IS 'Owner only: allow (test databases) or forbid pinning the clock.';

CREATE FUNCTION compute.clock_require_pinning(p_what text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Guard: pinning and moving the clock are test facilities.
    IF NOT (SELECT c.pin_allowed FROM compute.clock_control AS c) THEN
        PERFORM compute.raise_error('ACCESS_DENIED', pg_catalog.format('the clock of this database cannot be %s', p_what),
            'The test clock is for test databases: an owner enables it with SELECT compute.clock_allow_pinning(true).');
    END IF;
END
$$;
COMMENT ON FUNCTION compute.clock_require_pinning(text) IS 'Raise ACCESS_DENIED unless this database allows the test clock.';

CREATE FUNCTION compute.clock_pin(p_at timestamptz, p_local boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM compute.clock_require_pinning('pinned');
    IF p_at IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'clock_pin needs a time',
            'Pass a timestamptz, or call compute.clock_unpin() to follow now() again.');
    END IF;
    PERFORM pg_catalog.set_config('bc.now', p_at::text, p_local);
    PERFORM pg_catalog.set_config('bc.now_offset', '', p_local);
    RETURN compute.compute_now();
END
$$;
COMMENT ON FUNCTION compute.clock_pin(timestamptz, boolean) IS 'Test clock: compute_now() returns p_at until moved or unpinned.';

CREATE FUNCTION compute.clock_advance(p_by interval, p_local boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_offset interval := coalesce(nullif(pg_catalog.current_setting('bc.now_offset', true), '')::interval, interval '0');
BEGIN
    PERFORM compute.clock_require_pinning('moved');
    IF p_by IS NULL THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'clock_advance needs an interval',
            'Pass an interval such as interval ''2 hours''.');
    END IF;
    -- The offset is added to the pin, or to now() when the clock is not pinned.
    PERFORM pg_catalog.set_config('bc.now_offset', (v_offset + p_by)::text, p_local);
    RETURN compute.compute_now();
END
$$;
COMMENT ON FUNCTION compute.clock_advance(interval, boolean) IS 'Test clock: move compute_now() forward (or back) by p_by.';

CREATE FUNCTION compute.clock_unpin(p_local boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE sql
AS $$
    SELECT pg_catalog.set_config('bc.now', '', p_local), pg_catalog.set_config('bc.now_offset', '', p_local);
    SELECT compute.compute_now();
$$;
COMMENT ON FUNCTION compute.clock_unpin(boolean) IS 'Test clock: follow now() again.';

-- Each client role reads the clock through its own schema (Python's Clock anchors to it).
CREATE FUNCTION api.now() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.compute_now() $$;
CREATE FUNCTION node_api.now() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.compute_now() $$;
CREATE FUNCTION worker_api.now() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.compute_now() $$;
CREATE FUNCTION ops.now() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.compute_now() $$;

COMMIT;
