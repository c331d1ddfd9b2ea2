-- What an operator may type into ops.device_set_layout that no GPU can take is INVALID_ARGUMENT
-- (an unknown GPU NOT_FOUND), never another SQLSTATE: no layout, a placement too large for an
-- integer, a time that is not one.
BEGIN;
SELECT plan(6);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN gpu text;
UPDATE t SET gpu = d.uuid FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1);

CREATE FUNCTION pg_temp.refusal(p_layout text, p_at timestamptz DEFAULT NULL) RETURNS text LANGUAGE sql AS $$
    SELECT pgtap_fixtures.refusal(format('SELECT ops.device_set_layout(%L, %L, %L)', (SELECT gpu FROM t), p_layout, p_at))
$$;

SELECT is(pg_temp.refusal(NULL),
          'BC400: Use whole, timeslice:N, or mig:PROFILE@PLACEMENT[,PROFILE@PLACEMENT...], e.g. mig:3g.71gb@0,3g.71gb@4.',
          'no layout');
SELECT is(pg_temp.refusal('mig:3g.71gb@99999999999'),
          'BC400: Use whole, timeslice:N, or mig:PROFILE@PLACEMENT[,PROFILE@PLACEMENT...], e.g. mig:3g.71gb@0,3g.71gb@4.',
          'a placement too large for an integer');
SELECT is(pg_temp.refusal('mig:3g.71gb@12'), 'BC400: Legal placements of 3g.71gb: [0, 4].', 'a placement the profile does not have');
SELECT is(pg_temp.refusal('whole', 'infinity'), 'BC400: Omit the time to change now, or pass a future time.', 'a change at infinity');
SELECT is(pgtap_fixtures.refusal($$SELECT ops.device_set_layout('GPU-nope', 'whole')$$), 'BC404: Name a GPU by its uuid (GPU-…), as ops.devices lists them.',
          'an unknown GPU');
SELECT is(pg_temp.refusal('whole', '2030-01-01 06:00+00'), 'no error', 'a whole GPU from 06:00 is fine');

SELECT * FROM finish();
ROLLBACK;
