-- Fail closed (P11): only "allowed": true allows. A missing, null, string or odd decision denies.
BEGIN;
SELECT plan(5);

CREATE TEMP TABLE decisions (decision jsonb);
INSERT INTO decisions VALUES ('{}'), ('{"allowed": null}'), ('{"allowed": "true"}'), ('{"allowed": 1}'), ('null');

SELECT is(api.admit((api.prepare('projects.create', pgtap_fixtures.tenant('A'), jsonb_build_object('name', 'p' || n)) ->> 'admission_id')::uuid,
                    d.decision) #>> '{error,code}', 'ACCESS_DENIED', 'decision ' || coalesce(d.decision::text, 'NULL') || ' denies')
  FROM (SELECT decision, row_number() OVER () AS n FROM decisions) AS d;

SELECT * FROM finish();
ROLLBACK;
