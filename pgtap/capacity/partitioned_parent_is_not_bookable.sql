-- A GPU split into MIG instances offers only its instances: the whole GPU (its parent) is not an
-- atom while it is split, so shape gpu gets nothing from it, and atoms_disjoint forbids a whole-GPU
-- atom overlapping its MIG atoms in time.
BEGIN;
SELECT plan(10);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- One node of two H200s: GPU 0 split in two 3g.71gb from now, GPU 1 whole.
CREATE TEMP TABLE t ON COMMIT DROP AS SELECT pgtap_fixtures.fleet('pack', 1, 2) AS pool;
ALTER TABLE t ADD COLUMN mig_gpu uuid, ADD COLUMN whole_gpu uuid;
UPDATE t SET mig_gpu = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 0),
             whole_gpu = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = pgtap_fixtures.node(t.pool, 1) AND d.index = 1);
SELECT compute.device_set_layout(mig_gpu, 'mig:3g.71gb@0,3g.71gb@4') FROM t;

SELECT results_eq(
    $$SELECT a.shape, a.slices FROM compute.atoms AS a, t WHERE a.device_id = t.mig_gpu ORDER BY a.slices$$,
    $$VALUES ('mig:3g.71gb'::text, '[0,4)'::int4range), ('mig:3g.71gb', '[4,8)')$$,
    'the split GPU''s atoms are its two instances, no whole-GPU atom');
SELECT is((SELECT array_agg(f.free_atoms) FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-01 01:00+00', '2030-01-01 02:00+00') AS f),
          ARRAY[1], 'capacity_free counts one whole GPU on the node: the unsplit one');
CREATE TEMP TABLE booked ON COMMIT DROP AS
    SELECT pgtap_fixtures.book(t.pool, 'gpu', 1, '2030-01-01 01:00+00', '2030-01-01 02:00+00') AS doc FROM t;
SELECT is((SELECT d.device_id FROM compute.devices AS d, booked WHERE d.uuid = booked.doc #>> '{bookings,0,device_uuid}'),
          whole_gpu, 'a whole-GPU request lands on the unsplit GPU') FROM t;
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 1,
                                          '2030-01-01 01:00+00', '2030-01-01 02:00+00'))$$,
                 'BC409', NULL, 'a second whole-GPU request gets nothing from the split GPU');
SELECT throws_ok($$SELECT compute.reserve(pgtap_fixtures.request((SELECT pool FROM t), 'gpu', 2,
                                          '2030-01-03 01:00+00', '2030-01-03 02:00+00'))$$,
                 'BC409', NULL, 'two whole GPUs are not there even when nothing is booked');
SELECT is(jsonb_array_length(pgtap_fixtures.book(t.pool, 'mig:3g.71gb', 2, '2030-01-01 01:00+00', '2030-01-01 02:00+00') -> 'bookings'),
          2, 'its two instances are bookable in the same window') FROM t;

-- The parent as an atom again, by hand: refused wherever it overlaps the instances in time.
CREATE FUNCTION pg_temp.insert_gpu_atom(p_valid tstzrange) RETURNS void LANGUAGE sql AS $$
    INSERT INTO compute.atoms (atom_id, site_id, pool_id, node_id, device_id, node_rank, device_index, kind,
                               slices, shares, gpu_fraction, valid)
    SELECT gen_random_uuid(), a.site_id, a.pool_id, a.node_id, a.device_id, a.node_rank, a.device_index, 'gpu',
           int4range(0, 8), int4range(0, NULL), 1, p_valid
      FROM compute.atoms AS a, t WHERE a.device_id = t.mig_gpu LIMIT 1
$$;
SELECT throws_ok($$SELECT pg_temp.insert_gpu_atom('[2030-01-01 00:00+00,)')$$, '23P01', NULL,
                 'atoms_disjoint: no whole-GPU atom while the instances are valid');
SELECT throws_ok($$SELECT pg_temp.insert_gpu_atom('[2029-12-31 00:00+00, 2030-01-01 00:01+00)')$$, '23P01', NULL,
                 'not even for one minute of overlap');
SELECT lives_ok($$SELECT pg_temp.insert_gpu_atom('[2029-12-31 00:00+00, 2030-01-01 00:00+00)')$$,
                'a whole-GPU atom ending where the instances begin is fine');

-- A later change back to whole makes the parent bookable from then on, not before.
SELECT compute.device_set_layout(mig_gpu, 'whole', '2030-01-02 00:00+00') FROM t;
SELECT is((SELECT array_agg(f.free_atoms) FROM t, compute.capacity_free(t.pool, 'gpu', '2030-01-02 01:00+00', '2030-01-02 02:00+00') AS f),
          ARRAY[2], 'after the change back to whole both GPUs are bookable whole');

SELECT * FROM finish();
ROLLBACK;
