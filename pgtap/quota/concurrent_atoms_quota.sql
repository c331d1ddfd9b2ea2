-- max_atoms caps the tenant's atoms held at any one instant of the window (the peak), live ones
-- (provisional or active) only; QUOTA_EXCEEDED says in its HINT how many remain. A project quota
-- applies to the project's reservations on top of the tenant's.
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT pgtap_fixtures.fleet('pack', 3, 2) AS pool, compute.project_create('00000000-0000-0000-0000-000000000001', 'training') AS project;
SELECT compute.quota_set('00000000-0000-0000-0000-000000000001', NULL, pool, 3, NULL) IS NOT NULL FROM t;
CREATE FUNCTION pg_temp.book(p_count integer, p_start timestamptz, p_end timestamptz, p_extra jsonb DEFAULT '{}') RETURNS text
LANGUAGE sql AS $$
    SELECT pgtap_fixtures.refusal(format('SELECT pgtap_fixtures.book(%L, %L, %s, %L, %L, %L)', (SELECT pool FROM t),
                                  CASE WHEN p_extra ? 'shape' THEN p_extra ->> 'shape' ELSE 'gpu' END, p_count, p_start, p_end,
                                  p_extra - 'shape'))
$$;

SELECT is(pg_temp.book(2, '2030-01-01 01:00+00', '2030-01-01 03:00+00'), 'no error', '2 GPUs 01:00-03:00');
SELECT is(pg_temp.book(1, '2030-01-01 02:00+00', '2030-01-01 04:00+00'), 'no error', '1 GPU 02:00-04:00: 3 at the peak');
SELECT is(pg_temp.book(1, '2030-01-01 02:30+00', '2030-01-01 03:30+00'),
          'BC429: 0 atoms remain during the window (3 held at the peak, 1 asked); release some or ask for fewer.',
          'a fourth atom overlapping the peak is QUOTA_EXCEEDED');
SELECT is(pg_temp.book(3, '2030-01-01 03:30+00', '2030-01-01 05:00+00'),
          'BC429: 2 atoms remain during the window (1 held at the peak, 3 asked); release some or ask for fewer.',
          'three atoms from 03:30, where one is held, would be four');
SELECT is(pg_temp.book(2, '2030-01-01 03:00+00', '2030-01-01 05:00+00'), 'no error',
          '2 GPUs from 03:00: the first booking has ended (peak 1 + 2)');
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b, t WHERE b.pool_id = t.pool AND b.state = 'held'), 5,
          'the refused requests left no booking behind');
SELECT is(pg_temp.book(1, '2030-01-01 02:30+00', '2030-01-01 03:30+00', '{"tenant_id": "00000000-0000-0000-0000-000000000002"}'),
          'no error', 'another tenant is not counted');

-- A MIG instance is one atom like a whole GPU; a voided (provisional) reservation stops counting.
SELECT is(pg_temp.book(1, '2030-01-01 06:00+00', '2030-01-01 07:00+00', '{"shape": "mig:3g.71gb"}'),
          'BC409: No GPU of this pool is laid out as mig:3g.71gb during the window.', 'setup: no MIG yet');
SELECT compute.device_set_layout(d.device_id, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 06:00+00')
  FROM compute.devices AS d, t WHERE d.node_id = pgtap_fixtures.node(t.pool, 3);
CREATE TEMP TABLE provisional ON COMMIT DROP AS
    SELECT (compute.reserve(pgtap_fixtures.request(t.pool, 'mig:3g.71gb', 3, '2030-01-01 06:00+00', '2030-01-01 07:00+00'))
            ->> 'reservation_id')::uuid AS id FROM t;
SELECT is(pg_temp.book(1, '2030-01-01 06:30+00', '2030-01-01 07:30+00'),
          'BC429: 0 atoms remain during the window (3 held at the peak, 1 asked); release some or ask for fewer.',
          'three provisional MIG instances count as three atoms');
SELECT compute.reservation_void(id) IS NOT NULL FROM provisional;
SELECT is(pg_temp.book(1, '2030-01-01 06:30+00', '2030-01-01 07:30+00'), 'no error', 'voided, they count no more');

-- A project quota of 1 on top of the tenant's.
SELECT compute.quota_set('00000000-0000-0000-0000-000000000001', project, pool, 1, NULL) IS NOT NULL FROM t;
SELECT is(pg_temp.book(1, '2030-01-02 00:00+00', '2030-01-02 01:00+00', jsonb_build_object('project_id', project)), 'no error',
          'one atom for the project') FROM t;
SELECT is(pg_temp.book(1, '2030-01-02 00:00+00', '2030-01-02 01:00+00', jsonb_build_object('project_id', project)),
          'BC429: 0 atoms remain during the window (1 held at the peak, 1 asked); release some or ask for fewer.',
          'a second one exceeds the project quota') FROM t;

SELECT * FROM finish();
ROLLBACK;
