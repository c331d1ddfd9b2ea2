-- Revert better_compute:node_reports_verified_by_the_worker from pg
-- Written by `better-compute db change` (or `db regenerate`) from the catalog, not by hand (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DELETE FROM compute.limits WHERE name IN ('node_reports_pending_per_node', 'node_reports_rejected_kept');

COMMENT ON TABLE compute.node_identities IS 'How a node joined: its public key (DER SubjectPublicKeyInfo) and the token it used.';

COMMENT ON TABLE compute.node_identities IS 'How a node joined: its public key (DER SubjectPublicKeyInfo) and the token it used.';

COMMENT ON TABLE compute.node_reports IS NULL;

SET LOCAL check_function_bodies = off;

DROP FUNCTION compute.node_api_removed(text);

DROP FUNCTION compute.node_command_result(uuid,uuid,text,text);

DROP FUNCTION compute.node_inventory_reported(uuid,jsonb);

DROP FUNCTION compute.node_key_replace(uuid,bytea);

DROP FUNCTION compute.node_report_apply(bigint,bytea);

DROP FUNCTION compute.node_report_reject(bigint,text);

DROP FUNCTION compute.node_spec_observed(uuid,bigint,jsonb);

DROP FUNCTION compute.report_base64(jsonb,text);

DROP FUNCTION compute.report_bigint(jsonb,text);

DROP FUNCTION compute.report_uuid(jsonb,text);

DROP FUNCTION node_api.report(uuid,bigint,jsonb);

DROP FUNCTION worker_api.node_report_rejected(bigint,text);

DROP FUNCTION worker_api.node_report_verified(bigint,bytea);

DROP FUNCTION worker_api.node_reports_pending(uuid,integer);

CREATE OR REPLACE FUNCTION node_api.command_result(p_node_id uuid, p_epoch bigint, p_command_id uuid, p_status text, p_output text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    IF p_status IS NULL OR p_status NOT IN ('succeeded', 'failed', 'unsupported') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid command status %L', p_status),
            'Use succeeded, failed or unsupported.');
    END IF;
    -- The first result wins; a repeated one (at-least-once delivery) changes nothing.
    UPDATE compute.node_commands
       SET state = p_status, finished_at = compute.compute_now(),
           output = pg_catalog.left(p_output, compute.limit('command_output_bytes')::integer)
     WHERE command_id = p_command_id AND node_id = p_node_id AND state = 'pending';
    RETURN FOUND;
END
$function$;

COMMENT ON FUNCTION node_api.command_result(uuid,bigint,uuid,text,text) IS 'A command''s result (the first one counts; output bounded).';

CREATE OR REPLACE FUNCTION node_api.inventory_report(p_node_id uuid, p_epoch bigint, p_inventory jsonb)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    IF p_inventory ->> 'hostname' IS DISTINCT FROM (SELECT n.name FROM compute.nodes AS n WHERE n.node_id = p_node_id) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'the inventory names another host',
            'A node reports its own inventory; a renamed host joins again with a new token.');
    END IF;
    RETURN compute.node_register((SELECT n.pool_id FROM compute.nodes AS n WHERE n.node_id = p_node_id), p_inventory ->> 'hostname', p_inventory);
END
$function$;

COMMENT ON FUNCTION node_api.inventory_report(uuid,bigint,jsonb) IS 'A node''s inventory, under its current session (FENCED otherwise).';

CREATE OR REPLACE FUNCTION node_api.node_key_renewed(p_node_id uuid, p_epoch bigint, p_public_key bytea)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    -- A renewal may bring a new key: the one the node signs with from now on.
    PERFORM compute.session_require(p_node_id, p_epoch);
    IF p_public_key IS NULL OR octet_length(p_public_key) NOT BETWEEN 32 AND 1024 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a renewed key is the DER of a public key', 'Send the DER SubjectPublicKeyInfo.');
    END IF;
    UPDATE compute.node_identities SET public_key = p_public_key WHERE node_id = p_node_id;
END
$function$;

COMMENT ON FUNCTION node_api.node_key_renewed(uuid,bigint,bytea) IS 'The key of a node''s renewed certificate (under its current session).';

CREATE OR REPLACE FUNCTION node_api.node_public_key(p_node_id uuid)
 RETURNS bytea
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO ''
AS $function$
    SELECT i.public_key FROM compute.node_identities AS i WHERE i.node_id = p_node_id
$function$;

COMMENT ON FUNCTION node_api.node_public_key(uuid) IS 'The public key a node joined with (to check its signatures).';

CREATE OR REPLACE FUNCTION node_api.spec_observed(p_node_id uuid, p_epoch bigint, p_generation bigint, p_conditions jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $function$
BEGIN
    PERFORM compute.session_require(p_node_id, p_epoch);
    IF p_conditions IS NULL OR pg_catalog.jsonb_typeof(p_conditions) <> 'array'
       OR pg_catalog.octet_length(p_conditions::text) > compute.limit('node_message_bytes') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'conditions are a bounded JSON array', 'Send [] when all is well.');
    END IF;
    -- Observed only ever moves forward, and never past what was signed for the node.
    UPDATE compute.node_specs
       SET observed_generation = greatest(observed_generation, p_generation), observed_at = compute.compute_now(), conditions = p_conditions
     WHERE node_id = p_node_id AND p_generation <= signed_generation;
    IF NOT FOUND THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('generation %s was never sent to node %s', p_generation, p_node_id),
            'Report the generation of the spec you applied.');
    END IF;
END
$function$;

COMMENT ON FUNCTION node_api.spec_observed(uuid,bigint,bigint,jsonb) IS 'The node applied a spec generation; its conditions.';

COMMENT ON TABLE compute.node_identities IS 'How a node joined: its public key (DER SubjectPublicKeyInfo) and the token it used.';

COMMENT ON TABLE compute.node_reports IS NULL;

DROP VIEW ops.node_reports_rejected;

DROP TABLE compute.node_reports;

ALTER TABLE compute.node_identities DROP COLUMN report_epoch, DROP COLUMN report_seq;

COMMIT;
