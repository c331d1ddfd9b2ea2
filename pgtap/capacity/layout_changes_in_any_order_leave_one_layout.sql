-- Layout changes of one GPU in any order, at any future time, some of its atoms booked: each either
-- succeeds or answers a contract code (SQLSTATE class BC), and after a success the GPU's atoms at
-- every instant from the change on are exactly the new layout's; compute.atom_busy follows every change.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT setseed(0.2030);

CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 1) AS pool;
ALTER TABLE t ADD COLUMN device uuid, ADD COLUMN gpu text;
UPDATE t SET device = d.device_id, gpu = d.uuid FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1);
CREATE TEMP TABLE outcome (step integer, layout text, at timestamptz, sqlstate text, wrong text) ON COMMIT DROP;

DO $$
DECLARE
    v_layouts text[] := ARRAY['whole', 'mig:3g.71gb@0,3g.71gb@4', 'mig:7g.141gb@0', 'timeslice:2',
                              'mig:3g.71gb@0,1g.18gb@4,1g.18gb@5', 'timeslice:4'];
    v_shapes  text[] := ARRAY['gpu', 'mig:3g.71gb', 'slot', 'mig:1g.18gb'];
    v_t       record;
    v_layout  text;
    v_at      timestamptz;
    v_start   timestamptz;
    v_state   text;
    v_wrong   text;
BEGIN
    SELECT * INTO v_t FROM t;
    FOR v_step IN 1..200 LOOP
        -- Now and then a booking of some shape in the next two days (refusals are fine here).
        IF random() < 0.3 THEN
            v_start := '2030-01-01 00:00+00'::timestamptz + make_interval(hours => floor(random() * 48)::integer);
            BEGIN
                PERFORM pgtap_fixtures.book(v_t.pool, v_shapes[1 + floor(random() * 4)::integer], 1,
                                            v_start, v_start + make_interval(hours => 1 + floor(random() * 6)::integer));
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
        END IF;
        -- Now and then a release, so that changes blocked before can go through.
        IF random() < 0.2 THEN
            PERFORM compute.reservation_release(b.reservation_id)
               FROM compute.bookings AS b WHERE b.device_id = v_t.device AND b.state = 'held'
              ORDER BY random() LIMIT 1;
        END IF;
        v_layout := v_layouts[1 + floor(random() * pg_catalog.array_length(v_layouts, 1))::integer];
        v_at := '2030-01-01 00:00+00'::timestamptz + make_interval(hours => floor(random() * 48)::integer);
        v_state := NULL;
        BEGIN
            PERFORM ops.device_set_layout(v_t.gpu, v_layout, v_at);
        EXCEPTION WHEN OTHERS THEN
            v_state := SQLSTATE;
        END;
        v_wrong := NULL;
        IF v_state IS NULL THEN
            -- The atoms valid at each hour from the change on (and far later) are the layout's, one each.
            SELECT pg_catalog.string_agg(p::text, ', ') INTO v_wrong
              FROM (SELECT v_at + make_interval(hours => h) AS p FROM generate_series(0, 60) AS h
                    UNION ALL SELECT '2040-01-01 00:00+00') AS probe (p)
             WHERE (SELECT array_agg(ROW(a.kind, a.profile, a.placement, a.slot, a.slot_count)::text ORDER BY a.slices, a.slot)
                      FROM compute.atoms AS a WHERE a.device_id = v_t.device AND a.valid @> probe.p)
                   IS DISTINCT FROM
                   (SELECT array_agg(ROW(l.kind, l.profile, l.placement, l.slot, l.slot_count)::text ORDER BY l.slices, l.slot)
                      FROM compute.layout_atoms(v_t.device, v_layout) AS l);
        END IF;
        INSERT INTO outcome VALUES (v_step, v_layout, v_at, v_state, v_wrong);
    END LOOP;
END $$;

SELECT is((SELECT array_agg(DISTINCT format('step %s %s at %s: %s', step, layout, at, sqlstate)) FROM outcome
            WHERE sqlstate NOT LIKE 'BC%'), NULL, 'every refusal is a contract code');
SELECT is((SELECT array_agg(format('step %s %s at %s: wrong atoms at %s', step, layout, at, wrong)) FROM outcome
            WHERE wrong IS NOT NULL), NULL, 'after each change, the GPU is laid out as it says from then on');
SELECT cmp_ok((SELECT count(*)::integer FROM outcome WHERE sqlstate IS NULL), '>=', 100, 'most changes succeed');
SELECT is((SELECT array_agg(m.atom_id) FROM compute.atom_busy_mismatches() AS m), NULL,
          'every atom''s busy summary and its copied place and validity (compute.atom_busy) followed the changes');

SELECT * FROM finish();
ROLLBACK;
