-- compute.limit reads one bound; ops.limits lists the bounds of docs/architecture.md §14.
BEGIN;
SELECT plan(5);

SELECT is(compute.limit('http_body_bytes'), 65536::bigint, 'HTTP body is capped at 64 KiB');
UPDATE compute.limits SET value = 12345 WHERE name = 'atoms_per_reservation';
SELECT is(compute.limit('atoms_per_reservation'), 12345::bigint, 'a changed limit is read back');
SELECT set_has($$SELECT name FROM ops.limits$$,
    $$VALUES ('http_body_bytes'), ('node_message_bytes'), ('commands_pending_per_node'),
             ('deliveries_pending_per_webhook'), ('atoms_per_reservation'),
             ('reservation_window_seconds'), ('metric_label_values')$$,
    'every bound docs/architecture.md §14 names has a row');
SELECT is_empty($$SELECT name FROM ops.limits WHERE name = 'daemon_journal_entries'$$,
    'no row for the daemon''s journal, which the daemon bounds itself (nothing here read it)');
SELECT throws_ok($$UPDATE compute.limits SET value = 0 WHERE name = 'http_body_bytes'$$, '23514', NULL,
                 'a limit is positive');

SELECT * FROM finish();
ROLLBACK;
