-- The trust bundle and the intent keys ride in every node's signed spec: a CA published,
-- activated or retired, or a change of the intent keys, is a new generation for every node (and
-- work to sign it); announcing the same intent keys again changes nothing.
BEGIN;
SELECT plan(4);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);

SELECT pgtap_fixtures.fleet('pack', 2, 1, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT compute.node_spec_refresh(n.node_id) FROM compute.nodes AS n WHERE n.pool_id = :'pool';
CREATE TEMP TABLE before AS SELECT node_id, generation FROM compute.node_specs;

SELECT worker_api.node_ca_publish('CA one', sha256('one'));
SELECT ok((SELECT bool_and(s.generation = b.generation + 1) FROM compute.node_specs AS s JOIN before AS b USING (node_id)),
          'a CA published: every node has a new generation');
SELECT ok((SELECT count(*) FROM compute.work WHERE kind = 'node.spec.sign' AND state = 'pending') >= 2,
          'to be signed');
SELECT ok(worker_api.node_intent_keys_announce(ARRAY[decode(repeat('11', 32), 'hex')]), 'new intent keys are a change');
SELECT ok(NOT worker_api.node_intent_keys_announce(ARRAY[decode(repeat('11', 32), 'hex')]), 'the same ones again are not');

SELECT * FROM finish();
ROLLBACK;
