-- The method catalog (DESIGN §7, P11): every API method is a row of api.methods. The relay holds
-- no per-method code: it reads this catalog, validates input against input_schema, and runs the
-- generic admission (sql/505_admission.sql) that calls the functions named here.
--
-- A method's functions (all in compute, all taking the tenant IAM decided for):
--   read      function(p_tenant_id uuid, p_input jsonb) RETURNS jsonb
--   mutation  function(p_tenant_id uuid, p_resource_id text, p_input jsonb) RETURNS jsonb, run at admit
--             prepare_function(p_tenant_id uuid, p_input jsonb) RETURNS jsonb {"id", "attributes"}: writes
--               provisional rows before the IAM decision (reservations.create); void_function(p_resource_id
--               text) undoes them on a deny or when the admission expires.
-- resource_key names the input field that holds the resource's id; NULL: a new resource (mutations,
-- its id made at prepare) or every resource of the type (reads, "*"). parent_key names the field
-- that holds the parent's id, checked to be the tenant's before anything else happens.
SET LOCAL ROLE bc_owner;

CREATE TABLE api.methods (
    method           text PRIMARY KEY CHECK (method ~ '^[a-z][A-Za-z]*\.[a-z][A-Za-z]*$'),
    action           text NOT NULL UNIQUE CHECK (action ~ '^compute:[a-z][A-Za-z]*:[a-z][A-Za-z]*$'),
    resource_type    text NOT NULL CHECK (resource_type ~ '^compute-[a-z-]+$'),
    kind             text NOT NULL CHECK (kind IN ('read', 'mutation')),
    summary          text NOT NULL CHECK (length(summary) BETWEEN 1 AND 200),
    input_schema     jsonb NOT NULL CHECK (input_schema ->> 'type' = 'object' AND input_schema ? 'properties'),
    function         regprocedure NOT NULL,
    resource_key     text,
    parent_type      text CHECK (parent_type ~ '^compute-[a-z-]+$'),
    parent_key       text,
    prepare_function regprocedure,
    void_function    regprocedure,
    event_type       text CHECK (event_type ~ '^[a-z_]+\.[a-z_]+$'),
    CHECK (action = 'compute:' || replace(method, '.', ':')),
    CHECK (resource_key IS NULL OR input_schema -> 'properties' ? resource_key),
    CHECK (parent_key IS NULL OR (parent_type IS NOT NULL AND input_schema -> 'properties' ? parent_key)),
    CHECK (kind = 'mutation' OR (prepare_function IS NULL AND void_function IS NULL AND event_type IS NULL)),
    CHECK ((prepare_function IS NULL) = (void_function IS NULL))
);
COMMENT ON TABLE api.methods IS 'The API: one row per method (action compute:{group}:{verb}, resource type, read or mutation, its SQL functions, its input JSON Schema).';

CREATE FUNCTION api.catalog()
RETURNS TABLE (method text, action text, resource_type text, kind text, summary text, input_schema jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    SELECT m.method, m.action, m.resource_type, m.kind, m.summary, m.input_schema FROM api.methods AS m ORDER BY m.method;
$$;
COMMENT ON FUNCTION api.catalog() IS 'The method catalog as the relay and the CLI read it.';

CREATE FUNCTION api.catalog_links()
RETURNS TABLE (method text, target text, key text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = ''
AS $$
    -- A method that creates a resource (a mutation not on an existing one) answers the new id under
    -- the key the resource type's other methods take it by (site_id, pool_id, ...); every other
    -- method whose input has that key can follow it. The OpenAPI document turns these into links,
    -- so tools can chain calls (sites.create -> pools.create -> ...).
    WITH type_keys AS (
        SELECT DISTINCT m.resource_type, m.resource_key AS key FROM api.methods AS m WHERE m.resource_key IS NOT NULL)
    SELECT c.method, t.method, k.key
      FROM api.methods AS c
      JOIN type_keys AS k ON k.resource_type = c.resource_type
      JOIN api.methods AS t ON t.method <> c.method AND t.input_schema -> 'properties' ? k.key
     WHERE c.kind = 'mutation' AND c.resource_key IS NULL
     ORDER BY c.method, t.method;
$$;
COMMENT ON FUNCTION api.catalog_links() IS 'Which methods can take the id a creating method answers, and under which key (OpenAPI links).';

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
            'List the methods with SELECT * FROM api.catalog() (or GET /api/compute/openapi.json).');
    END IF;
    RETURN v_method;
END
$$;
COMMENT ON FUNCTION compute.method_get(text) IS 'A catalog row, or NOT_FOUND.';

CREATE FUNCTION compute.input_check(p_schema jsonb, p_input jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
-- The database's own check of an input against the catalog (the relay checks the full JSON Schema
-- first; ops.call comes here directly): an object, no unknown fields, every required one present.
-- Field types are checked where each field is read (compute.request_field).
DECLARE
    v_field text;
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
    SELECT r INTO v_field FROM pg_catalog.jsonb_array_elements_text(coalesce(p_schema -> 'required', '[]')) AS r
     WHERE coalesce(p_input -> r, 'null') = 'null' ORDER BY r LIMIT 1;
    IF FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('%s is required', v_field),
            pg_catalog.format('Pass %s.', v_field));
    END IF;
END
$$;
COMMENT ON FUNCTION compute.input_check(jsonb, jsonb) IS 'INVALID_ARGUMENT unless the input is an object with no unknown field and every required one.';

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
