-- Revert better_compute:api_schema_pieces from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

UPDATE api.methods AS m
   SET input_schema = pg_catalog.jsonb_set(m.input_schema, '{properties}', coalesce((
       SELECT pg_catalog.jsonb_object_agg(f.key, f.value - 'x-limit')
         FROM pg_catalog.jsonb_each(compute.schema_resolve(m.input_schema) -> 'properties') AS f), '{}'));

COMMENT ON TABLE compute.api_schema_pieces IS NULL;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.schema_marker_unknown(text,text);

DROP FUNCTION compute.schema_resolve(jsonb);

CREATE OR REPLACE FUNCTION api.catalog()
 RETURNS TABLE(method text, action text, resource_type text, kind text, summary text, input_schema jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT m.method, m.action, m.resource_type, m.kind, m.summary, m.input_schema FROM api.methods AS m ORDER BY m.method;
$function$;

COMMENT ON FUNCTION api.catalog() IS 'The method catalog as the relay and the CLI read it.';

CREATE OR REPLACE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
-- The database's own check of an input against the catalog's input_schema: the relay checks the
-- same document first with a full JSON Schema validator, ops.call comes here directly, and the
-- rule lives in one place (the catalog row). An object, no unknown field, every required one, and
-- each field within its rule (compute.input_value_problem). A null field counts as absent.
DECLARE
    v_field   text;
    v_value   jsonb;
    v_problem text;
BEGIN
    IF p_input IS NULL OR pg_catalog.jsonb_typeof(p_input) <> 'object' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the input must be a JSON object', 'Send {} when a method takes no fields.');
    END IF;
    SELECT k INTO v_field FROM pg_catalog.jsonb_object_keys(p_input) AS k WHERE NOT (p_schema -> 'properties') ? k ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('unknown field %L', v_field),
            pg_catalog.format('The fields are: %s.', (SELECT pg_catalog.string_agg(k, ', ' ORDER BY k)
                                                          FROM pg_catalog.jsonb_object_keys(p_schema -> 'properties') AS k)));
    END IF;
    -- A secret the catalog marks x-sealed-as never reaches the database in plain text (P14): the
    -- relay seals it into that field; here it is refused before anything is written.
    SELECT k INTO v_field FROM pg_catalog.jsonb_each(p_input) AS e(k, v)
     WHERE e.v <> 'null' AND p_schema #> ARRAY['properties', e.k] ? 'x-sealed-as' ORDER BY k LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s reaches the database only sealed', v_field),
            pg_catalog.format('Send it through the HTTP relay, which seals it into %s with the worker''s key; at psql pass %s, '
                              'sealed to the key in ops.sealing_keys (docs/worker.md).',
                              p_schema #>> ARRAY['properties', v_field, 'x-sealed-as'], p_schema #>> ARRAY['properties', v_field, 'x-sealed-as']));
    END IF;
    SELECT r INTO v_field FROM pg_catalog.jsonb_array_elements_text(coalesce(p_schema -> 'required', '[]')) AS r
     WHERE coalesce(p_input -> r, 'null') = 'null' ORDER BY r LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', v_field),
            pg_catalog.format('Pass %s.', v_field));
    END IF;
    FOR v_field, v_value IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(p_input) AS e WHERE e.value <> 'null' ORDER BY e.key LOOP
        v_problem := compute.input_value_problem(p_schema #> ARRAY['properties', v_field], v_value);
        IF v_problem IS NOT NULL THEN
            PERFORM compute.raise_error('INVALID_ARGUMENT', v_field || ' ' || v_problem,
                'The method''s input_schema says what each field takes: SELECT input_schema FROM api.catalog() (or the OpenAPI document).');
        END IF;
    END LOOP;
END
$function$;

COMMENT ON TABLE compute.api_schema_pieces IS NULL;

DROP TABLE compute.api_schema_pieces;

COMMIT;
