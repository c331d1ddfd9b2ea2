-- compute.raise_error raises each contract code with its SQLSTATE, message and hint.
BEGIN;
SELECT plan(12);

SELECT throws_ok(format('SELECT compute.raise_error(%L, %L, %L)', e.code, 'boom ' || e.code, 'do something'),
                 e.sqlstate, 'boom ' || e.code, e.code || ' raises ' || e.sqlstate)
  FROM compute.error_codes AS e ORDER BY e.code;

SELECT results_eq(
    $$SELECT code, sqlstate, http_status FROM compute.error_codes ORDER BY code$$,
    $$VALUES ('ACCESS_DENIED', 'BC403', 403), ('ALREADY_EXISTS', 'BC419', 409), ('CAPACITY_CONFLICT', 'BC409', 409),
             ('FENCED', 'BC410', 409),
             ('GENERATION_CONFLICT', 'BC412', 409), ('IDEMPOTENCY_MISMATCH', 'BC422', 422),
             ('INVALID_ARGUMENT', 'BC400', 400), ('NOT_FOUND', 'BC404', 404), ('QUOTA_EXCEEDED', 'BC429', 429),
             ('UNSUPPORTED', 'BC501', 501)$$,
    'the contract is the table of docs/architecture.md §13, with ALREADY_EXISTS (docs/api.md)');

CREATE FUNCTION pg_temp.hint_of(p_code text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_hint text;
BEGIN
    PERFORM compute.raise_error(p_code, 'm', 'the hint');
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_hint = PG_EXCEPTION_HINT;
    RETURN v_hint;
END
$$;
SELECT is(pg_temp.hint_of('NOT_FOUND'), 'the hint', 'the HINT travels with the error');

SELECT * FROM finish();
ROLLBACK;
