-- Deploy better_compute:api_limits to pg
-- The bounds of the API: admissions, lists, join tokens (sql/030_limits.sql lists them all).

BEGIN;

INSERT INTO compute.limits (name, value, unit, description) VALUES
    ('admission_seconds',                60, 'seconds', 'How long an admission waits for its IAM decision before it is voided.'),
    ('admission_retention_seconds',   86400, 'seconds', 'How long decided admissions are kept for idempotent replays (1 day).'),
    ('api_list_rows',                  1000, 'count',   'Rows one API list answers.'),
    ('join_token_ttl_seconds',         3600, 'seconds', 'Default lifetime of a join token.'),
    ('join_token_ttl_seconds_max',   604800, 'seconds', 'Longest lifetime of a join token (7 days).');

COMMIT;
