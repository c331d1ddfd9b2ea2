-- The MIG profiles a registered H200 holds are what the real GPU reports (nvidia-smi mig -lgip and
-- -lgipp, parsed here from the raw fixture text), and compute.layout_atoms accepts exactly the
-- placements the GPU lists, each as memory slices [placement, placement + size).
BEGIN;
SELECT plan(16);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

-- The raw text: -lgip rows "|   0  MIG 3g.71gb          9     2/2        69.75 ..." and -lgipp rows
-- "GPU  0 Profile ID  9 Placements: {0,4}:4" or "GPU  0 Profile ID  5 Placement : {0}:4".
CREATE TEMP TABLE lines ON COMMIT DROP AS
    SELECT l AS line FROM pgtap_fixtures.files AS f, regexp_split_to_table(f.body, '\n') AS l
     WHERE f.name = 'nvidia-h200/nvidia-smi-mig.txt';
CREATE TEMP TABLE lgip ON COMMIT DROP AS
    SELECT m[2] AS name, m[3]::integer AS id, (m[4]::numeric * 1024)::integer AS memory_mib
      FROM lines, regexp_match(line, '^\|\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+\d+/\d+\s+([0-9.]+)\s') AS m
     WHERE m IS NOT NULL;
CREATE TEMP TABLE lgipp ON COMMIT DROP AS
    SELECT m[2]::integer AS id, string_to_array(m[3], ',')::integer[] AS placements, m[4]::integer AS slices
      FROM lines, regexp_match(line, '^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([0-9,]+)\}:(\d+)\s*$') AS m
     WHERE m IS NOT NULL;
CREATE TEMP TABLE smi ON COMMIT DROP AS
    SELECT p.name, p.id, g.slices, g.placements, p.memory_mib FROM lgip AS p JOIN lgipp AS g USING (id);

SELECT is((SELECT count(*)::integer FROM lgip), 7, 'nvidia-smi mig -lgip lists 7 GPU instance profiles');
SELECT is((SELECT count(*)::integer FROM smi), 7, 'and -lgipp the placements of each of them');

-- The fixture inventory, registered as it is.
CREATE TEMP TABLE t ON COMMIT DROP AS
    SELECT compute.pool_create(compute.site_create('fixture-site'), 'h200', 'NVIDIA H200') AS pool;
ALTER TABLE t ADD COLUMN node uuid, ADD COLUMN device uuid;
UPDATE t SET node = compute.node_register(pool, 'gpu-node-01',
                                          (SELECT body::jsonb FROM pgtap_fixtures.files WHERE name = 'nvidia-h200/inventory.json'));
UPDATE t SET device = (SELECT d.device_id FROM compute.devices AS d WHERE d.node_id = t.node);

SELECT results_eq(
    $$SELECT d.uuid, d.mig_supported, d.layout FROM compute.devices AS d, t WHERE d.node_id = t.node$$,
    $$VALUES ('GPU-fa1e3565-6f0b-4506-b6d4-3b9b3e1f32a9'::text, true, 'whole'::text)$$,
    'the fixture''s one GPU is registered, MIG-capable, whole (MIG mode disabled)');
SELECT set_eq(
    $$SELECT p ->> 'name' AS name, (p ->> 'id')::integer AS id, (p ->> 'slices')::integer AS slices,
             ARRAY(SELECT jsonb_array_elements_text(p -> 'placements')::integer) AS placements,
             (p ->> 'memory_mib')::integer AS memory_mib
        FROM compute.devices AS d, t, jsonb_array_elements(d.mig_profiles) AS p WHERE d.device_id = t.device$$,
    $$SELECT name, id, slices, placements, memory_mib FROM smi$$,
    'the device''s mig_profiles are what nvidia-smi reports: name, id, size in slices, placements, memory');

-- Every profile at every start slice 0..7: legal exactly where -lgipp lists it.
CREATE FUNCTION pg_temp.atoms_of(p_device uuid, p_layout text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_result text;
BEGIN
    SELECT string_agg(a.slices::text || ' ' || a.gpu_fraction::numeric(4,3), ', ' ORDER BY a.slices)
      INTO v_result FROM compute.layout_atoms(p_device, p_layout) AS a;
    RETURN v_result;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;
SELECT set_eq(
    $$SELECT s.name, x, pg_temp.atoms_of(t.device, format('mig:%s@%s', s.name, x)) AS atoms
        FROM smi AS s, t, generate_series(0, 7) AS x$$,
    $$SELECT s.name, x, CASE WHEN x = ANY (s.placements)
                             THEN int4range(x, x + s.slices)::text || ' ' || (s.slices / 8.0)::numeric(4,3)
                             ELSE 'BC400' END AS atoms
        FROM smi AS s, generate_series(0, 7) AS x$$,
    'each profile is accepted at the placements the GPU lists (slices [p, p+size)) and INVALID_ARGUMENT elsewhere');

SELECT results_eq(
    $$SELECT a.kind, a.profile, a.placement, a.slices, a.shares, a.gpu_fraction
        FROM t, compute.layout_atoms(t.device, 'mig:3g.71gb@0,3g.71gb@4') AS a ORDER BY a.slices$$,
    $$VALUES ('mig'::text, '3g.71gb'::text, 0, '[0,4)'::int4range, '[0,)'::int4range, 0.5),
             ('mig', '3g.71gb', 4, '[4,8)', '[0,)', 0.5)$$,
    'mig:3g.71gb@0,3g.71gb@4 is two atoms, slices [0,4) and [4,8), half a GPU each');
SELECT is(pg_temp.atoms_of(device, 'mig:7g.141gb@0'), '[0,8) 1.000', 'mig:7g.141gb@0 is one atom of all 8 slices') FROM t;
SELECT is(pg_temp.atoms_of(device, 'mig:4g.71gb@0,3g.71gb@4'), '[0,4) 0.500, [4,8) 0.500', '4g.71gb@0 and 3g.71gb@4 fit together') FROM t;
SELECT is(pg_temp.atoms_of(device, 'mig:' || (SELECT string_agg('1g.18gb@' || k, ',') FROM generate_series(0, 6) AS k)),
          (SELECT string_agg(format('[%s,%s) 0.125', k, k + 1), ', ') FROM generate_series(0, 6) AS k),
          'seven 1g.18gb fit, one slice each') FROM t;
SELECT throws_ok(format($$SELECT * FROM compute.layout_atoms(%L, 'mig:3g.71gb@2')$$, device), 'BC400',
                 '3g.71gb cannot be placed at 2', '3g.71gb@2 is not a placement of the GPU') FROM t;
SELECT throws_ok(format($$SELECT * FROM compute.layout_atoms(%L, 'mig:4g.71gb@4')$$, device), 'BC400',
                 '4g.71gb cannot be placed at 4', '4g.71gb@4 is not either') FROM t;
SELECT throws_ok(format($$SELECT * FROM compute.layout_atoms(%L, 'mig:3g.71gb@0,2g.35gb@2')$$, device), 'BC400',
                 '2g.35gb@2 overlaps another instance', 'instances must not share slices') FROM t;
SELECT throws_ok(format($$SELECT * FROM compute.layout_atoms(%L, 'mig:5g.90gb@0')$$, device), 'BC400',
                 'GPU GPU-fa1e3565-6f0b-4506-b6d4-3b9b3e1f32a9 has no MIG profile ''5g.90gb''', 'an unknown profile is refused') FROM t;
SELECT throws_ok(format($$SELECT * FROM compute.layout_atoms(%L, 'mig:3g.71gb')$$, device), 'BC400',
                 'invalid layout ''mig:3g.71gb''', 'a profile without a placement is refused') FROM t;

-- device_set_layout takes the same layouts: 3g.71gb@0,3g.71gb@4 from now.
SELECT compute.device_set_layout(device, 'mig:3g.71gb@0,3g.71gb@4') FROM t;
SELECT results_eq(
    $$SELECT a.shape, a.placement, a.slices FROM compute.atoms AS a, t WHERE a.device_id = t.device ORDER BY a.slices$$,
    $$VALUES ('mig:3g.71gb'::text, 0, '[0,4)'::int4range), ('mig:3g.71gb', 4, '[4,8)')$$,
    'the device laid out as two 3g.71gb has those two atoms');
SELECT throws_ok(format($$SELECT compute.device_set_layout(%L, 'mig:4g.71gb@4')$$, device), 'BC400', NULL,
                 'device_set_layout refuses an illegal placement') FROM t;

SELECT * FROM finish();
ROLLBACK;
