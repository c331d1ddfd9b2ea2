-- A layout change that lands before two changes already scheduled (MIG at 10:00, whole again at
-- 20:00, then whole from 05:00) calls both off: the GPU is whole from 05:00 on, as one atom where
-- the bookings allow it, so a booking may cross 20:00. Where both the atom of today and the one
-- scheduled for 20:00 hold live bookings they stay two atoms, one ending where the other starts.
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

CREATE TEMP TABLE t ON COMMIT DROP AS
SELECT s.name, pgtap_fixtures.fleet('pack', 1, 1) AS pool FROM (VALUES ('nobody'), ('later'), ('both')) AS s (name);
ALTER TABLE t ADD COLUMN device uuid, ADD COLUMN gpu text;
UPDATE t SET device = d.device_id, gpu = d.uuid FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1);

CREATE FUNCTION pg_temp.schedule_three(p_name text, p_book_between boolean) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_t record;
BEGIN
    SELECT * INTO v_t FROM t WHERE name = p_name;
    PERFORM ops.device_set_layout(v_t.gpu, 'mig:3g.71gb@0,3g.71gb@4', '2030-01-01 10:00+00');
    PERFORM ops.device_set_layout(v_t.gpu, 'whole', '2030-01-01 20:00+00');
    IF p_book_between THEN   -- the whole GPU scheduled for 20:00, booked the next day
        PERFORM pgtap_fixtures.book(v_t.pool, 'gpu', 1, '2030-01-02 01:00+00', '2030-01-02 02:00+00');
    END IF;
    RETURN pgtap_fixtures.refusal(pg_catalog.format($q$SELECT ops.device_set_layout(%L, 'whole', '2030-01-01 05:00+00')$q$, v_t.gpu));
END $$;

CREATE FUNCTION pg_temp.atoms(p_name text) RETURNS TABLE (shape text, valid tstzrange) LANGUAGE sql AS $$
    SELECT a.shape, a.valid FROM compute.atoms AS a JOIN t ON t.device = a.device_id WHERE t.name = p_name ORDER BY lower(a.valid)
$$;

-- On a GPU nobody books: the issue's three calls.
SELECT is(pg_temp.schedule_three('nobody', false), 'no error', 'whole from 05:00 before MIG at 10:00 and whole at 20:00 succeeds');
SELECT results_eq($$SELECT * FROM pg_temp.atoms('nobody')$$,
                  $$VALUES ('gpu'::text, '[2030-01-01 00:00+00,)'::tstzrange)$$,
                  'one whole-GPU atom from the start on: the MIG atoms and the 20:00 atom never exist');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t WHERE name = 'nobody'), 'gpu', 1,
                                             '2030-01-01 18:00+00', '2030-01-01 22:00+00')$$,
                'a booking may cross 20:00');

-- The atom scheduled for 20:00 holds a booking, today's atom none: the booked one stays, from the start on.
SELECT is(pg_temp.schedule_three('later', true), 'no error', 'the same change succeeds when the 20:00 atom is booked');
SELECT results_eq($$SELECT * FROM pg_temp.atoms('later')$$,
                  $$VALUES ('gpu'::text, '[2030-01-01 00:00+00,)'::tstzrange)$$,
                  'still one whole-GPU atom from the start on');
SELECT is((SELECT b.atom_id FROM compute.bookings AS b JOIN t ON t.device = b.device_id WHERE t.name = 'later'),
          (SELECT a.atom_id FROM compute.atoms AS a JOIN t ON t.device = a.device_id WHERE t.name = 'later'),
          'the booking is on it');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t WHERE name = 'later'), 'gpu', 1,
                                             '2030-01-01 18:00+00', '2030-01-01 22:00+00')$$,
                'and a booking may cross 20:00');

-- Both atoms hold bookings: two atoms meeting at 20:00, both bookings kept.
SELECT pgtap_fixtures.book(pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00') ->> 'state' FROM t WHERE name = 'both';
SELECT is(pg_temp.schedule_three('both', true), 'no error', 'the same change succeeds when both atoms are booked');
SELECT results_eq($$SELECT * FROM pg_temp.atoms('both')$$,
                  $$VALUES ('gpu'::text, '[2030-01-01 00:00+00, 2030-01-01 20:00+00)'::tstzrange),
                           ('gpu', '[2030-01-01 20:00+00,)')$$,
                  'two whole-GPU atoms, one ending where the other starts');
SELECT is((SELECT count(*)::integer FROM compute.bookings AS b JOIN compute.atoms AS a ON a.atom_id = b.atom_id
             JOIN t ON t.device = b.device_id
            WHERE t.name = 'both' AND b.state = 'held' AND a.valid @> b.during), 2,
          'both bookings kept, each inside its atom');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t WHERE name = 'both'), 'gpu', 1,
                                             '2030-01-01 05:00+00', '2030-01-01 20:00+00')$$,
                'the GPU is bookable between the change and 20:00');
SELECT lives_ok($$SELECT pgtap_fixtures.book((SELECT pool FROM t WHERE name = 'both'), 'gpu', 1,
                                             '2030-01-01 20:00+00', '2030-01-01 23:00+00')$$,
                'and from 20:00 on');

SELECT * FROM finish();
ROLLBACK;
