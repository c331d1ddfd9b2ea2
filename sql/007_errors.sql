-- The error contract (docs/architecture.md §13). SQL raises project SQLSTATEs of class BC with a HINT a person can
-- act on; the relay maps SQLSTATE to a stable code and an HTTP status. This table is the contract's
-- one place: every process reads it at start-up through error_contract() (below).
-- CAPACITY_CONFLICT is also what the relay reports for PostgreSQL's own 23P01 (exclusion
-- violation) and 40P01 (deadlock) on the booking path.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.error_codes (
    code        text CONSTRAINT error_codes_pkey PRIMARY KEY CONSTRAINT error_codes_code_check CHECK (code ~ '^[A-Z][A-Z_]*$'),
    sqlstate    text NOT NULL CONSTRAINT error_codes_sqlstate_key UNIQUE CONSTRAINT error_codes_sqlstate_check CHECK (sqlstate ~ '^BC[0-9A-Z]{3}$'),
    http_status integer NOT NULL CONSTRAINT error_codes_http_status_check CHECK (http_status BETWEEN 400 AND 599),
    meaning     text NOT NULL
);
COMMENT ON TABLE compute.error_codes IS 'Error contract: code, SQLSTATE and HTTP status (docs/architecture.md §13).';

INSERT INTO compute.error_codes (code, sqlstate, http_status, meaning) VALUES
    ('INVALID_ARGUMENT',     'BC400', 400, 'The request is malformed or a value is out of range.'),
    ('ACCESS_DENIED',        'BC403', 403, 'The caller may not do this.'),
    ('NOT_FOUND',            'BC404', 404, 'No such object, or not visible to the caller.'),
    ('CAPACITY_CONFLICT',    'BC409', 409, 'The capacity asked for is not free.'),
    ('GENERATION_CONFLICT',  'BC412', 409, 'The object changed since the caller read it.'),
    ('ALREADY_EXISTS',       'BC419', 409, 'An object with that name exists already.'),
    ('IDEMPOTENCY_MISMATCH', 'BC422', 422, 'The idempotency key was used with a different request.'),
    ('QUOTA_EXCEEDED',       'BC429', 429, 'The request would exceed a quota.'),
    ('FENCED',               'BC410', 409, 'The caller''s session, lease or epoch is stale.'),
    ('UNSUPPORTED',          'BC501', 501, 'The kind of request is not supported.');

CREATE FUNCTION compute.raise_error(p_code text, p_message text, p_hint text, p_detail text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_sqlstate text;
BEGIN
    -- Guard: a helper that raised an unlisted code or no hint would break the contract itself.
    SELECT e.sqlstate INTO v_sqlstate FROM compute.error_codes AS e WHERE e.code = p_code;
    IF v_sqlstate IS NULL OR p_hint IS NULL OR p_message IS NULL THEN
        RAISE EXCEPTION 'compute.raise_error called with code %, message %, hint %', p_code, p_message, p_hint
            USING ERRCODE = 'internal_error',
                  HINT = 'Pass a code listed in compute.error_codes, a message and a hint.';
    END IF;
    IF p_detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_sqlstate, MESSAGE = p_message, HINT = p_hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_sqlstate, MESSAGE = p_message, HINT = p_hint, DETAIL = p_detail;
END
$$;
COMMENT ON FUNCTION compute.raise_error(text, text, text, text) IS 'Raise a contract error: code (see compute.error_codes), message, hint.';

CREATE VIEW ops.error_codes AS
    SELECT e.code, e.sqlstate, e.http_status, e.meaning FROM compute.error_codes AS e;
COMMENT ON VIEW ops.error_codes IS 'The error contract, for operators.';

-- Every process maps SQLSTATEs to codes and statuses from these rows, read when it opens its pool
-- (py/better_compute/errors.py keeps only PostgreSQL's own SQLSTATEs); each client role reads them
-- through its own schema, as it reads the clock.
CREATE FUNCTION api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the relay read it when they start.';
CREATE FUNCTION node_api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION node_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the gateway read it when they start.';
CREATE FUNCTION worker_api.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION worker_api.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as the worker read it when they start.';
CREATE FUNCTION ops.error_contract()
RETURNS TABLE (code text, sqlstate text, http_status integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = ''
AS $$ SELECT e.code, e.sqlstate, e.http_status FROM compute.error_codes AS e ORDER BY e.sqlstate $$;
COMMENT ON FUNCTION ops.error_contract() IS 'The error contract (code, SQLSTATE, HTTP status) as operators and the CLI read it when they start.';
