-- What a gateway (bc_gateway) may execute, exactly: join, sessions and heartbeats, reading the
-- signed intent it relays down, and appending what nodes sign to their inbox (node_api.report).
-- No function that writes a node's report, result, key or acknowledgement itself (P14): the ones
-- that did only answer UNSUPPORTED now.
BEGIN;
SELECT plan(1);

SELECT set_eq($$
    SELECT p.oid::regprocedure::text
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname IN ('compute', 'api', 'node_api', 'worker_api', 'ops')
       AND has_function_privilege('bc_gateway', p.oid, 'EXECUTE')
       AND has_schema_privilege('bc_gateway', n.oid, 'USAGE')
$$, ARRAY['node_api.now()',
          'node_api.join_request(bytea,bytea,jsonb,bytea,text,text)',
          'node_api.renew_request(uuid,bigint,text,text,bytea,jsonb)',
          'node_api.gateway_certificate_request(text,text,bytea,text[])',
          'node_api.certificate_get(uuid)',
          'node_api.trust_bundle()',
          'node_api.session_open(uuid,text,bytea)',
          'node_api.heartbeats(text,uuid[],bigint[])',
          'node_api.session_close(uuid,bigint)',
          'node_api.spec_get(uuid,bigint)',
          'node_api.commands_due(uuid,bigint)',
          'node_api.push_due(uuid[],bigint[])',
          'node_api.report(uuid,bigint,jsonb)',
          'node_api.error_contract()',
          -- removed writes: they only answer UNSUPPORTED (pgtap/nodes/removed_gateway_writes_are_unsupported.sql)
          'node_api."join"(text,jsonb,bytea)',  -- took the raw join token (issue 20)
          'node_api.session_open(uuid,text)',  -- without the certificate's key
          'node_api.node_public_key(uuid)',
          'node_api.inventory_report(uuid,bigint,jsonb)',
          'node_api.node_key_renewed(uuid,bigint,bytea)',
          'node_api.spec_observed(uuid,bigint,bigint,jsonb)',
          'node_api.command_result(uuid,bigint,uuid,text,text)'],
   'bc_gateway executes exactly the relay''s functions');

SELECT * FROM finish();
ROLLBACK;
