-- The method catalog (docs/architecture.md §7, P11): every API method is a row of api.methods. The relay holds
-- no per-method code: it reads this catalog, validates input against input_schema, and runs the
-- generic admission (sql/505_admission.sql) that calls the functions named here.
--
-- A method's functions (all in compute, all taking the tenant IAM decided for):
--   read      function(p_tenant_id uuid, p_input jsonb) RETURNS jsonb
--   mutation  function(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb, run at admit
--             prepare_function(p_tenant_id uuid, p_input jsonb) RETURNS jsonb {"id", "attributes"}: writes
--               provisional rows before the IAM decision (reservations.create); void_function(p_resource_id
--               text) undoes them on a deny or when the admission expires.
--             check_function(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS void: raises
--               before the IAM decision when the input cannot apply to the resource as it is now
--               (reservations.extend, renew); the function checks again at admit, under its locks.
-- resource_key names the input field that holds the resource's id; NULL: a new resource (mutations,
-- its id made at prepare) or every resource of the type (reads, "*"). parent_key names the field
-- that holds the parent's id, checked to be the tenant's before anything else happens.
SET LOCAL ROLE bc_owner;

-- Shared pieces of the input schemas (one place for each fact): a field of a method's input_schema
-- written {"$piece": "uuid"} is the piece named uuid; a rule with "x-limit": {"maximum":
-- "atoms_per_reservation"} takes that keyword's value from compute.limits when it is read. Both are
-- resolved where a schema is read (compute.schema_resolve: api.catalog(), compute.input_check), so
-- raising a limit changes what the API accepts.
CREATE TABLE compute.api_schema_pieces (
    name        text CONSTRAINT api_schema_pieces_pkey PRIMARY KEY CONSTRAINT api_schema_pieces_name_check CHECK (name ~ '^[a-z][a-z0-9_]*$'),
    schema      jsonb NOT NULL CONSTRAINT api_schema_pieces_schema_check CHECK (pg_catalog.jsonb_typeof(schema) = 'object' AND NOT schema ? '$piece'),
    description text NOT NULL CONSTRAINT api_schema_pieces_description_check CHECK (length(description) BETWEEN 1 AND 200)
);
COMMENT ON TABLE compute.api_schema_pieces IS 'Named JSON Schema fragments the method catalog''s input schemas refer to ({"$piece": name}).';

INSERT INTO compute.api_schema_pieces (name, schema, description) VALUES
    ('idempotency_key', '{"type":"string","minLength":1,"maxLength":200}', 'The retry key every mutation takes.'),
    ('uuid',            '{"type":"string","format":"uuid"}', 'An id.'),
    ('timestamp',       '{"type":"string","format":"date-time"}', 'An ISO 8601 time with a zone.'),
    ('name',            '{"type":"string","pattern":"^[a-z0-9][a-z0-9._-]{0,62}$"}', 'The name of a site, pool or project.'),
    ('shape',           '{"type":"string","pattern":"^(gpu|slot|mig:[0-9]+g\\.[0-9]+gb(\\+me)?|bare_metal)$"}', 'An atom shape: gpu, slot or a MIG profile; bare_metal: whole machines.'),
    ('list_limit',      '{"type":"integer","minimum":1,"x-limit":{"maximum":"api_list_rows"}}', 'The rows a list answers.'),
    ('reason',          '{"type":"string","minLength":1,"maxLength":1000}', 'Why an operator acts on a node.');

CREATE TABLE api.methods (
    method           text CONSTRAINT methods_pkey PRIMARY KEY CONSTRAINT methods_method_check CHECK (method ~ '^[a-z][A-Za-z]*\.[a-z][A-Za-z]*$'),
    action           text NOT NULL CONSTRAINT methods_action_key UNIQUE CONSTRAINT methods_action_check CHECK (action ~ '^compute:[a-z][A-Za-z]*:[a-z][A-Za-z]*$'),
    resource_type    text NOT NULL CONSTRAINT methods_resource_type_check CHECK (resource_type ~ '^compute-[a-z-]+$'),
    kind             text NOT NULL CONSTRAINT methods_kind_check CHECK (kind IN ('read', 'mutation')),
    summary          text NOT NULL CONSTRAINT methods_summary_check CHECK (length(summary) BETWEEN 1 AND 200),
    input_schema     jsonb NOT NULL CONSTRAINT methods_input_schema_check CHECK (input_schema ->> 'type' = 'object' AND input_schema ? 'properties'),
    function         regprocedure NOT NULL,
    resource_key     text,
    parent_type      text CONSTRAINT methods_parent_type_check CHECK (parent_type ~ '^compute-[a-z-]+$'),
    parent_key       text,
    prepare_function regprocedure,
    void_function    regprocedure,
    event_type       text CONSTRAINT methods_event_type_check CHECK (event_type ~ '^[a-z_]+\.[a-z_]+$'),
    check_function   regprocedure,
    CONSTRAINT methods_action_follows_method CHECK (action = 'compute:' || replace(method, '.', ':')),
    CONSTRAINT methods_resource_key_in_input CHECK (resource_key IS NULL OR input_schema -> 'properties' ? resource_key),
    CONSTRAINT methods_parent_key_in_input CHECK (parent_key IS NULL OR (parent_type IS NOT NULL AND input_schema -> 'properties' ? parent_key)),
    CONSTRAINT methods_mutation_fields_only_on_mutations CHECK (kind = 'mutation' OR (prepare_function IS NULL AND void_function IS NULL AND event_type IS NULL)),
    CONSTRAINT methods_prepare_with_void CHECK ((prepare_function IS NULL) = (void_function IS NULL)),
    CONSTRAINT methods_check_function_of_mutation CHECK (kind = 'mutation' OR check_function IS NULL)
);
COMMENT ON TABLE api.methods IS 'The API: one row per method (action compute:{group}:{verb}, resource type, read or mutation, its SQL functions, its input JSON Schema).';

CREATE FUNCTION compute.schema_marker_unknown(p_kind text, p_name text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no %s %L', p_kind, p_name),
        'Schema pieces are the rows of compute.api_schema_pieces; limits, of ops.limits.');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.schema_marker_unknown(text, text) IS 'NOT_FOUND for a schema marker naming no piece or no limit (fail closed).';

CREATE FUNCTION compute.schema_resolve(p_schema jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
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
$$;
COMMENT ON FUNCTION compute.schema_resolve(jsonb) IS 'A method''s input_schema as clients see it: schema pieces and limits (x-limit) resolved (idempotent).';

CREATE FUNCTION api.catalog()
RETURNS TABLE (method text, action text, resource_type text, kind text, summary text, input_schema jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    SELECT m.method, m.action, m.resource_type, m.kind, m.summary, compute.schema_resolve(m.input_schema)
      FROM api.methods AS m ORDER BY m.method;
$$;
COMMENT ON FUNCTION api.catalog() IS 'The method catalog as the relay and the CLI read it (schema pieces and limits resolved).';

CREATE FUNCTION api.catalog_links()
RETURNS TABLE (method text, target text, key text, pointer text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    -- A method that creates a resource (a mutation not on an existing one) answers the new id under
    -- the key the resource type's other methods take it by (site_id, pool_id, ...): at /data/<key>.
    -- A method that lists a type (a read not on one resource) answers items carrying that key: the
    -- first one's at /data/0/<key>. Every other method whose input has the key can follow it. The
    -- OpenAPI document turns these into links, so tools can chain calls (sites.create ->
    -- pools.create -> ..., nodes.list -> nodes.cordon).
    WITH type_keys AS (
        SELECT DISTINCT m.resource_type, m.resource_key AS key FROM api.methods AS m WHERE m.resource_key IS NOT NULL)
    SELECT c.method, t.method, k.key, CASE c.kind WHEN 'mutation' THEN '/data/' ELSE '/data/0/' END || k.key
      FROM api.methods AS c
      JOIN type_keys AS k ON k.resource_type = c.resource_type
      JOIN api.methods AS t ON t.method <> c.method AND t.input_schema -> 'properties' ? k.key
     WHERE c.resource_key IS NULL
     ORDER BY c.method, t.method;
$$;
COMMENT ON FUNCTION api.catalog_links() IS 'Which methods can take the id a creating method answers, or a listing method''s first item carries: the key and where in the answer (OpenAPI links).';

CREATE FUNCTION compute.method_get(p_method text)
RETURNS api.methods
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_method api.methods;
BEGIN
    SELECT * INTO v_method FROM api.methods AS m WHERE m.method = p_method;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no method %L', p_method),
            'List the methods: SELECT method FROM api.catalog().');
    END IF;
    RETURN v_method;
END
$$;
COMMENT ON FUNCTION compute.method_get(text) IS 'A catalog row, or NOT_FOUND.';

CREATE FUNCTION compute.input_value_problem(p_rule jsonb, p_value jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
-- What is wrong with one value under one rule of the catalog's JSON Schema, or NULL when nothing
-- is. It knows the keywords the catalog uses (type, enum, minLength, maxLength, pattern, minimum,
-- maximum, maxItems, items, maxProperties); formats (uuid, date-time) are checked where a field is
-- read (compute.request_field), whose words a wrong type is refused with here too. The catalog's
-- patterns are written to mean the same in JSON Schema (ECMA-262) and in PostgreSQL's regexes.
DECLARE
    v_type  text := p_rule ->> 'type';
    v_kind  text := pg_catalog.jsonb_typeof(p_value);
    v_text  text;
    v_item  jsonb;
    v_index integer := 0;
    v_count integer;
    v_found text;
BEGIN
    -- Type (JSON Schema's integer is any number with a zero fraction: 371.0 is one).
    IF (CASE WHEN v_type IS NULL THEN false
             WHEN v_kind <> (CASE v_type WHEN 'integer' THEN 'number' ELSE v_type END) THEN true
             WHEN v_type = 'integer' THEN (p_value #>> '{}')::numeric <> pg_catalog.trunc((p_value #>> '{}')::numeric)
             ELSE false END) THEN
        RETURN pg_catalog.format('is not a valid %s: %s', v_type, pg_catalog.left(p_value::text, 100));
    END IF;
    IF p_rule ? 'enum' AND NOT p_rule -> 'enum' @> pg_catalog.jsonb_build_array(p_value) THEN
        RETURN pg_catalog.format('is not one of its enum %s', p_rule -> 'enum');
    END IF;
    CASE v_kind
    WHEN 'string' THEN
        v_text := p_value #>> '{}';
        IF pg_catalog.length(v_text) < (p_rule ->> 'minLength')::integer THEN
            RETURN pg_catalog.format('is shorter than its minLength %s', p_rule ->> 'minLength');
        ELSIF pg_catalog.length(v_text) > (p_rule ->> 'maxLength')::integer THEN
            RETURN pg_catalog.format('is longer than its maxLength %s (%s characters)', p_rule ->> 'maxLength', pg_catalog.length(v_text));
        ELSIF v_text !~ (p_rule ->> 'pattern') THEN
            RETURN pg_catalog.format('does not match its pattern %s: %s', p_rule ->> 'pattern', pg_catalog.left(v_text, 100));
        END IF;
    WHEN 'number' THEN
        IF (p_value #>> '{}')::numeric < (p_rule ->> 'minimum')::numeric THEN
            RETURN pg_catalog.format('is below its minimum %s', p_rule ->> 'minimum');
        ELSIF (p_value #>> '{}')::numeric > (p_rule ->> 'maximum')::numeric THEN
            RETURN pg_catalog.format('is above its maximum %s', p_rule ->> 'maximum');
        END IF;
    WHEN 'array' THEN
        IF pg_catalog.jsonb_array_length(p_value) > (p_rule ->> 'maxItems')::integer THEN
            RETURN pg_catalog.format('has %s items, more than its maxItems %s', pg_catalog.jsonb_array_length(p_value), p_rule ->> 'maxItems');
        END IF;
        IF p_rule ? 'items' THEN
            FOR v_item IN SELECT e FROM pg_catalog.jsonb_array_elements(p_value) AS e LOOP
                v_found := compute.input_value_problem(p_rule -> 'items', v_item);
                IF v_found IS NOT NULL THEN
                    RETURN pg_catalog.format('[%s] %s', v_index, v_found);
                END IF;
                v_index := v_index + 1;
            END LOOP;
        END IF;
    WHEN 'object' THEN
        v_count := (SELECT count(*) FROM pg_catalog.jsonb_object_keys(p_value));
        IF v_count > (p_rule ->> 'maxProperties')::integer THEN
            RETURN pg_catalog.format('has %s fields, more than its maxProperties %s', v_count, p_rule ->> 'maxProperties');
        END IF;
    ELSE
        NULL;
    END CASE;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION compute.input_value_problem(jsonb, jsonb) IS 'What is wrong with a value under one rule of a method''s input_schema, or NULL.';

CREATE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
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
$$;
COMMENT ON FUNCTION compute.input_check(jsonb, jsonb) IS 'INVALID_ARGUMENT unless the input conforms to a method''s input_schema (null fields count as absent).';

CREATE FUNCTION compute.input_uuid(p_input jsonb, p_field text, p_required boolean DEFAULT true)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN (compute.request_field(p_input, p_field, 'uuid', p_required) #>> '{}')::uuid;
END
$$;
COMMENT ON FUNCTION compute.input_uuid(jsonb, text, boolean) IS 'A uuid field of an input; INVALID_ARGUMENT naming it otherwise.';

CREATE FUNCTION compute.input_text(p_input jsonb, p_field text, p_required boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN compute.request_field(p_input, p_field, 'string', p_required) #>> '{}';
END
$$;
COMMENT ON FUNCTION compute.input_text(jsonb, text, boolean) IS 'A string field of an input; INVALID_ARGUMENT naming it otherwise.';

CREATE FUNCTION compute.input_integer(p_input jsonb, p_field text, p_required boolean DEFAULT true)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN (compute.request_field(p_input, p_field, 'integer', p_required) #>> '{}')::integer;
END
$$;
COMMENT ON FUNCTION compute.input_integer(jsonb, text, boolean) IS 'An integer field of an input; INVALID_ARGUMENT naming it otherwise.';

CREATE FUNCTION compute.list_limit(p_input jsonb)
RETURNS integer
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_limit integer := coalesce(compute.input_integer(p_input, 'limit', false), compute.limit('api_list_rows'));
BEGIN
    IF v_limit < 1 OR v_limit > compute.limit('api_list_rows') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('limit %s is out of range', v_limit),
            pg_catalog.format('Ask for 1 to %s rows (limit api_list_rows).', compute.limit('api_list_rows')));
    END IF;
    RETURN v_limit;
END
$$;
COMMENT ON FUNCTION compute.list_limit(jsonb) IS 'The rows a list answers: the input''s limit, bounded by api_list_rows.';
