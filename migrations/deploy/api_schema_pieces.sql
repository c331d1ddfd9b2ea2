-- Deploy better_compute:api_schema_pieces to pg
-- One place for each API fact: the input schemas' shared fields are named pieces
-- (compute.api_schema_pieces) and their bounds that copy a limit name it (x-limit), resolved where a
-- schema is read (api.catalog(), compute.input_check), so raising a limit changes what the API accepts.
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

CREATE TABLE compute.api_schema_pieces (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]*$'),
    schema      jsonb NOT NULL CHECK (pg_catalog.jsonb_typeof(schema) = 'object' AND NOT schema ? '$piece'),
    description text NOT NULL CHECK (length(description) BETWEEN 1 AND 200)
);

SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION api.catalog()
 RETURNS TABLE(method text, action text, resource_type text, kind text, summary text, input_schema jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT m.method, m.action, m.resource_type, m.kind, m.summary, compute.schema_resolve(m.input_schema)
      FROM api.methods AS m ORDER BY m.method;
$function$;

COMMENT ON FUNCTION api.catalog() IS 'The method catalog as the relay and the CLI read it (schema pieces and limits resolved).';

CREATE OR REPLACE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
AS $function$
-- The database's own check of an input against the catalog's input_schema: the relay checks the
-- same document first with a full JSON Schema validator, ops.call comes here directly, and the
-- rule lives in one place (the catalog row). An object, no unknown field, every required one, and
-- each field within its rule (compute.input_value_problem). A null field counts as absent. The
-- schema's pieces and limits are resolved here, once per call (compute.schema_resolve).
DECLARE
    v_schema  jsonb := compute.schema_resolve(p_schema);
    v_field   text;
    v_value   jsonb;
    v_problem text;
BEGIN
    IF p_input IS NULL OR pg_catalog.jsonb_typeof(p_input) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the input must be a JSON object', 'Send {} when a method takes no fields.');
    END IF;
    SELECT k INTO v_field FROM pg_catalog.jsonb_object_keys(p_input) AS k WHERE NOT (v_schema -> 'properties') ? k ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown field %L', v_field),
            pg_catalog.format('The fields are: %s.', (SELECT pg_catalog.string_agg(k, ', ' ORDER BY k)
                                                          FROM pg_catalog.jsonb_object_keys(v_schema -> 'properties') AS k)));
    END IF;
    -- A secret the catalog marks x-sealed-as never reaches the database in plain text (P14): the
    -- relay seals it into that field; here it is refused before anything is written.
    SELECT k INTO v_field FROM pg_catalog.jsonb_each(p_input) AS e(k, v)
     WHERE e.v <> 'null' AND v_schema #> ARRAY['properties', e.k] ? 'x-sealed-as' ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s reaches the database only sealed', v_field),
            pg_catalog.format('Send it through the HTTP relay, which seals it into %s with the worker''s key; at psql pass %s, '
                              'sealed to the key in ops.sealing_keys (docs/worker.md).',
                              v_schema #>> ARRAY['properties', v_field, 'x-sealed-as'], v_schema #>> ARRAY['properties', v_field, 'x-sealed-as']));
    END IF;
    SELECT r INTO v_field FROM pg_catalog.jsonb_array_elements_text(coalesce(v_schema -> 'required', '[]')) AS r
     WHERE coalesce(p_input -> r, 'null') = 'null' ORDER BY r LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', v_field),
            pg_catalog.format('Pass %s.', v_field));
    END IF;
    FOR v_field, v_value IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(p_input) AS e WHERE e.value <> 'null' ORDER BY e.key LOOP
        v_problem := compute.input_value_problem(v_schema #> ARRAY['properties', v_field], v_value);
        IF v_problem IS NOT NULL THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', v_field || ' ' || v_problem,
                'The method''s input_schema says what each field takes: SELECT input_schema FROM api.catalog() (or the OpenAPI document).');
        END IF;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION compute.schema_marker_unknown(p_kind text, p_name text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no %s %L', p_kind, p_name),
        'Schema pieces are the rows of compute.api_schema_pieces; limits, of ops.limits.');
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION compute.schema_marker_unknown(text,text) IS 'NOT_FOUND for a schema marker naming no piece or no limit (fail closed).';

CREATE OR REPLACE FUNCTION compute.schema_resolve(p_schema jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- A field written {"$piece": name} becomes that piece; each keyword of a rule's "x-limit"
    -- ({"maximum": "atoms_per_reservation"}) takes the limit's current value. The x-limit marker
    -- stays in the answer, so a reader knows which limit a bound follows. A marker naming no piece or
    -- no limit is NOT_FOUND, never a field without a rule. One statement: input_check runs it on
    -- every request (plpgsql: its plan is kept for the session).
    RETURN (WITH fields AS (
        SELECT f.key, CASE WHEN f.value ? '$piece'
                           THEN coalesce(p.schema, compute.schema_marker_unknown('schema piece', f.value ->> '$piece'))
                           ELSE f.value END AS rule
          FROM pg_catalog.jsonb_each(p_schema -> 'properties') AS f
          LEFT JOIN compute.api_schema_pieces AS p ON p.name = f.value ->> '$piece')
    SELECT p_schema || pg_catalog.jsonb_build_object('properties', coalesce(pg_catalog.jsonb_object_agg(d.key, d.rule || coalesce(
               (SELECT pg_catalog.jsonb_object_agg(b.key, coalesce(pg_catalog.to_jsonb(l.value),
                                                                   compute.schema_marker_unknown('limit', b.value #>> '{}')))
                  FROM pg_catalog.jsonb_each(d.rule -> 'x-limit') AS b
                  LEFT JOIN compute.limits AS l ON l.name = b.value #>> '{}'), '{}')), '{}'))
      FROM fields AS d);
END
$function$;

COMMENT ON FUNCTION compute.schema_resolve(jsonb) IS 'A method''s input_schema as clients see it: schema pieces and limits (x-limit) resolved (idempotent).';

COMMENT ON TABLE compute.api_schema_pieces IS 'Named JSON Schema fragments the method catalog''s input schemas refer to ({"$piece": name}).';

COMMENT ON TABLE compute.api_schema_pieces IS 'Named JSON Schema fragments the method catalog''s input schemas refer to ({"$piece": name}).';

COMMENT ON TABLE compute.api_schema_pieces IS 'Named JSON Schema fragments the method catalog''s input schemas refer to ({"$piece": name}).';

INSERT INTO compute.api_schema_pieces (name, schema, description) VALUES
    ('idempotency_key', '{"type":"string","minLength":1,"maxLength":200}', 'The retry key every mutation takes.'),
    ('uuid',            '{"type":"string","format":"uuid"}', 'An id.'),
    ('timestamp',       '{"type":"string","format":"date-time"}', 'An ISO 8601 time with a zone.'),
    ('name',            '{"type":"string","pattern":"^[a-z0-9][a-z0-9._-]{0,62}$"}', 'The name of a site, pool or project.'),
    ('shape',           '{"type":"string","pattern":"^(gpu|slot|mig:[0-9]+g\\.[0-9]+gb(\\+me)?)$"}', 'An atom shape: gpu, slot or a MIG profile.'),
    ('list_limit',      '{"type":"integer","minimum":1,"x-limit":{"maximum":"api_list_rows"}}', 'The rows a list answers.'),
    ('reason',          '{"type":"string","minLength":1,"maxLength":1000}', 'Why an operator acts on a node.');

UPDATE api.methods AS m
   SET input_schema = pg_catalog.jsonb_set(m.input_schema, '{properties}', coalesce((
       SELECT pg_catalog.jsonb_object_agg(f.key, CASE
                  WHEN l.limit_name IS NOT NULL
                  THEN (f.value - 'maximum') || pg_catalog.jsonb_build_object('x-limit', pg_catalog.jsonb_build_object('maximum', l.limit_name))
                  WHEN p.name IS NOT NULL THEN pg_catalog.jsonb_build_object('$piece', p.name)
                  ELSE f.value END)
         FROM pg_catalog.jsonb_each(m.input_schema -> 'properties') AS f
         LEFT JOIN (VALUES ('reservations.create', 'count', 64, 'atoms_per_reservation'),
                           ('reservations.create', 'hold_seconds', 86400, 'hold_seconds_max'),
                           ('offerings.create', 'max_count', 64, 'atoms_per_reservation'),
                           ('offerings.create', 'max_duration_seconds', 7776000, 'reservation_window_seconds'),
                           ('joinTokens.create', 'ttl_seconds', 604800, 'join_token_ttl_seconds_max'))
                   AS l(method, field, maximum, limit_name)
                ON l.method = m.method AND l.field = f.key AND f.value -> 'maximum' = pg_catalog.to_jsonb(l.maximum)
         LEFT JOIN (VALUES ('idempotency_key', 'idempotency_key', '{"type":"string","minLength":1,"maxLength":200}'::jsonb),
                           ('name', 'name', '{"type":"string","pattern":"^[a-z0-9][a-z0-9._-]{0,62}$"}'),
                           ('shape', 'shape', '{"type":"string","pattern":"^(gpu|slot|mig:[0-9]+g\\.[0-9]+gb(\\+me)?)$"}'),
                           ('reason', 'reason', '{"type":"string","minLength":1,"maxLength":1000}'),
                           ('limit', 'list_limit', '{"type":"integer","minimum":1,"maximum":1000}'),
                           (NULL, 'uuid', '{"type":"string","format":"uuid"}'),
                           (NULL, 'timestamp', '{"type":"string","format":"date-time"}'))
                   AS p(field, name, schema) ON (p.field IS NULL OR p.field = f.key) AND p.schema = f.value
       ), '{}'));

COMMIT;
