-- A denied reservations.create leaves nothing held: its provisional bookings are void, the denial
-- is audited, and the answer is ACCESS_DENIED.
BEGIN;
SELECT plan(5);

SELECT pgtap_fixtures.fleet('pack', 1, 2, false, pgtap_fixtures.tenant('A')) AS pool \gset
SELECT api.prepare('reservations.create', pgtap_fixtures.tenant('A'),
    jsonb_build_object('pool_id', :'pool', 'shape', 'gpu', 'count', 2, 'end', now() + interval '1 hour')) AS prepared \gset

SELECT is((SELECT count(*) FROM compute.bookings WHERE reservation_id = (:'prepared'::jsonb #>> '{iam,resource,id}')::uuid
                                                   AND state = 'held'), 2::bigint,
          'before the decision the request holds its atoms provisionally');
SELECT is(api.admit((:'prepared'::jsonb ->> 'admission_id')::uuid,
                    '{"allowed": false, "reason": "no statement allows", "matched": [], "principal": "user:bob"}') #>> '{error,code}',
          'ACCESS_DENIED', 'a deny answers ACCESS_DENIED');
SELECT is((SELECT state FROM compute.reservations WHERE reservation_id = (:'prepared'::jsonb #>> '{iam,resource,id}')::uuid),
          'void', 'the reservation is void');
SELECT is((SELECT count(*) FROM compute.bookings WHERE pool_id = :'pool' AND state = 'held'), 0::bigint,
          'no booking is live');
SELECT is((SELECT decision || ' ' || principal FROM compute.audit_events WHERE action = 'compute:reservations:create'),
          'deny user:bob', 'the denial is audited with its principal');

SELECT * FROM finish();
ROLLBACK;
