-- A site agent's gateway session (sql/710_agent_sessions.sql): a certificate is issued only when the
-- signer verified the request with the agent's registered signing key and it names this agent and
-- key; a session opens only for the key certified last, under the current signing key; claims and
-- results name the session (its random id), and one no longer current (a newer session, a replaced
-- signing key) is FENCED.
BEGIN;
SELECT plan(12);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset
SELECT agent_id AS agent, site_id AS site FROM compute.site_agents
 WHERE agent_id = (SELECT agent_id FROM compute.machines WHERE machine_id = :'machine') \gset
SELECT compute.node_ca_publish('a CA certificate', sha256('ca'::bytea));

SELECT throws_ok(format($$SELECT agent_api.certificate_request(%L, 'gw', 'csr', sha256('k1'::bytea), '{}')$$, :'agent'),
                 'BC403', NULL, 'an agent without a signing key gets no certificate request');
SELECT ops.site_agent_signing_key_set(:'agent', sha256('signing key'::bytea));
CREATE FUNCTION pg_temp.certify(p_agent uuid, p_key bytea, p_named uuid, p_verified bytea) RETURNS text LANGUAGE sql AS $$
    SELECT compute.svid_decide(agent_api.certificate_request(p_agent, 'gw', 'csr', p_key,
               jsonb_build_object('v', 1, 'purpose', 'agent.certificate', 'sig', 'c2ln',
                                  'body', jsonb_build_object('agent_id', p_named, 'public_key_sha256', encode(sha256(p_key), 'hex')))),
           p_verified, 'an agent certificate', sha256('ca'::bytea), NULL)
$$;
SELECT is(pg_temp.certify(:'agent', sha256('k1'::bytea), :'agent', sha256('another key'::bytea)), 'refused',
          'a request verified with another key than the registered one is refused');
SELECT is(pg_temp.certify(:'agent', sha256('k1'::bytea), gen_random_uuid(), sha256('signing key'::bytea)), 'refused',
          'a request that names another agent is refused');
SELECT is(pg_temp.certify(:'agent', sha256('k1'::bytea), :'agent', sha256('signing key'::bytea)), 'issued',
          'the agent''s own, verified with its registered key, is issued');

SELECT throws_ok(format($$SELECT agent_api.session_open(%L, %L, 'gw', sha256('k2'::bytea))$$, :'agent', :'site'),
                 'BC403', NULL, 'a key that was never certified opens no session');
SELECT throws_ok(format($$SELECT agent_api.session_open(%L, gen_random_uuid(), 'gw', sha256('k1'::bytea))$$, :'agent'),
                 'BC403', NULL, 'nor does the certified key under another site');
SELECT agent_api.session_open(:'agent', :'site', 'gw', sha256('k1'::bytea)) AS first \gset
SELECT is((:'first'::jsonb ->> 'epoch')::bigint, 1::bigint, 'the certified key opens epoch 1');
SELECT agent_api.session_open(:'agent', :'site', 'gw', sha256('k1'::bytea)) AS second \gset
SELECT is((:'second'::jsonb ->> 'epoch')::bigint, 2::bigint, 'dialing again opens epoch 2, under a new session id');
SELECT throws_ok(format('SELECT agent_api.ops_claim(%L, 1)', :'first'::jsonb ->> 'session_id'), 'BC410', NULL,
                 'a claim in the first session is FENCED');
SELECT is(jsonb_typeof(agent_api.ops_claim((:'second'::jsonb ->> 'session_id')::uuid, 1)), 'array',
          'a claim in the current session is answered');

SELECT ops.site_agent_signing_key_set(:'agent', sha256('a new signing key'::bytea));
SELECT throws_ok(format('SELECT agent_api.op_result(%L, ''{}'')', :'second'::jsonb ->> 'session_id'), 'BC410', NULL,
                 'once the signing key is replaced, the open session is FENCED');
SELECT throws_ok(format($$SELECT agent_api.session_open(%L, %L, 'gw', sha256('k1'::bytea))$$, :'agent', :'site'),
                 'BC403', NULL, 'and the key it certified opens no new one');

SELECT * FROM finish();
ROLLBACK;
