-- Every move that is not a row of compute.machine_transitions is refused (INVALID_ARGUMENT, with
-- a hint naming what an operator may do), and changes nothing; every legal row moves the machine.
BEGIN;
SELECT plan(3);
SELECT compute.clock_pin('2030-01-01 00:00+00', true);
SELECT pgtap_fixtures.fleet('pack', 0, 1) AS pool \gset
SELECT pgtap_fixtures.machine(:'pool', 'bm-1') AS machine \gset

CREATE TEMP TABLE tried (from_state text, event text, operator boolean, outcome text);
DO $$
DECLARE
    v_machine uuid := (SELECT machine_id FROM compute.machines WHERE name = 'bm-1');
    v_state text;
    v_event text;
    v_op    boolean;
BEGIN
    FOR v_state, v_event, v_op IN
        SELECT s.state, e.event, o.operator
          FROM compute.machine_states AS s
         CROSS JOIN unnest(ARRAY['manage', 'verified', 'provide', 'deployed', 'joined', 'release', 'cleaned', 'fail', 'retry', 'abort', 'explode']) AS e(event)
         CROSS JOIN unnest(ARRAY[true, false]) AS o(operator)
    LOOP
        UPDATE compute.machines SET state = v_state WHERE machine_id = v_machine;
        INSERT INTO tried VALUES (v_state, v_event, v_op,
            pgtap_fixtures.refusal(format('SELECT compute.machine_transition(%L, %L, NULL, %L)', v_machine, v_event, v_op)));
        -- refusal() swallowed the error, so a legal move took effect: put the state back for the next try
    END LOOP;
END $$;

SELECT is_empty($$
    SELECT t.from_state, t.event, t.operator FROM tried AS t
     WHERE NOT EXISTS (SELECT 1 FROM compute.machine_transitions AS m WHERE m.from_state = t.from_state AND m.event = t.event AND m.by_operator = t.operator)
       AND t.outcome NOT LIKE 'BC400: %'
$$, 'every move that is not a row is refused with INVALID_ARGUMENT');
SELECT is_empty($$
    SELECT t.from_state, t.event, t.operator, t.outcome FROM tried AS t
      JOIN compute.machine_transitions AS m ON m.from_state = t.from_state AND m.event = t.event AND m.by_operator = t.operator
     WHERE t.outcome <> 'no error'
$$, 'every row is a move that succeeds');
SELECT is(pgtap_fixtures.refusal($$SELECT ops.machine_provide('bm-1')$$) ~ '^BC400: From \w+ an operator may: ', true,
          'the hint says what an operator may do from the current state');

SELECT * FROM finish();
ROLLBACK;
