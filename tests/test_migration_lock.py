"""The migration runner's lock: one runner at a time, and a runner killed mid-flight blocks nobody; and a
runner leaves no session behind."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg.conninfo import conninfo_to_dict

from better_compute import embedded, migrate

HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from better_compute.migrate import migration_lock
    with migration_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(120)
""")


def advisory_lock_holders(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted",
                           (migrate.MIGRATION_LOCK_KEY,)).fetchone()
    return row[0] if row else 0


def test_a_killed_runner_does_not_block_the_next(empty_database: Callable[[], str]) -> None:
    dsn = empty_database()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, dsn], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert advisory_lock_holders(dsn) == 1
        holder.send_signal(signal.SIGKILL)  # dies holding the lock
        holder.wait(timeout=10)
        started = time.monotonic()
        assert migrate.migrate(dsn) == [change.name for change in migrate.read_plan().changes]
        assert time.monotonic() - started < 30
    finally:
        holder.kill()


def test_concurrent_runners_apply_each_change_once(empty_database: Callable[[], str]) -> None:
    dsn = empty_database()
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: migrate.migrate(dsn), range(3)))
    everything = [change.name for change in migrate.read_plan().changes]
    assert sorted(results, key=len) == [[], [], everything]
    assert all(error is None for _, error in migrate.verify(dsn))


def test_migrate_leaves_no_session_behind(empty_database: Callable[[], str], pg_server: embedded.Cluster) -> None:
    """A migrated database can be a template at once (make bench-capacity copies one): migrate() closes
    its connections itself instead of leaving one for the garbage collector."""
    dsn = empty_database()
    first = migrate.read_plan().changes[0].name
    gc.disable()  # what a long-lived process sees: collection does not come in time
    try:
        assert migrate.migrate(dsn, to=first) == [first]
        assert [name for name, applied, _ in migrate.status(dsn) if applied] == [first]
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                (conninfo_to_dict(dsn)["dbname"],)).fetchone()
    finally:
        gc.enable()
    assert left == (0,)
