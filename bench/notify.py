"""Committing throughput with NOTIFY (`make bench`; a measurement, not a test).

NOTIFY takes a cluster-wide lock at commit and holds it through the commit's WAL flush, so
transactions that all notify commit one at a time (issue 16). Content-free wake-ups are now sent by
compute.wake_at_commit, a deferred trigger (sql/400_work.sql): one committing transaction at a time
notifies, the others skip. In one
throwaway cluster with fsync ON (the schema migrated first, with fsync off, then the server restarted),
pgbench runs one-statement transactions at 1, 2, 8 and 16 clients:
  - commit: one row inserted;
  - + NOTIFY (before): the row and pg_notify, what every outbox and work-queue writer did;
  - + wake_at_commit (after): the row, into a table with the gated hint's trigger, what they do now;
  - outbox_emit (after): the real outbox write (an event, its aggregate's counter, the hint).
The workloads take turns at each client count (the load of the machine changes under all of them
alike). One session LISTENs on the channels throughout, as workers and relays do. Prints the curve
and the target, and writes the "notify" section of .bc/bench.json.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

from better_compute import embedded, migrate

from common import RESULTS, ROOT, machine, machine_line, throwaway_cluster, write_section

DBNAME = "bc_bench_notify"
CLIENT_COUNTS = (1, 2, 8, 16)
RUN_SECONDS = int(os.environ.get("BENCH_NOTIFY_SECONDS", "5"))
TARGET_WAKE_TO_COMMIT_AT_16 = 0.8  # "not flat-lined by NOTIFY": within 20% of committing without it

SETUP = """
CREATE TABLE bench_commits (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz DEFAULT now());
CREATE TABLE bench_commits_woken (LIKE bench_commits INCLUDING ALL);
CREATE CONSTRAINT TRIGGER bench_wake AFTER INSERT ON bench_commits_woken DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION compute.wake_at_commit('bc_outbox');
"""
WORKLOADS = {
    "commit": "INSERT INTO bench_commits DEFAULT VALUES;",
    "+ NOTIFY (before)": "WITH i AS (INSERT INTO bench_commits DEFAULT VALUES RETURNING id) "
                         "SELECT pg_catalog.pg_notify('bc_outbox', '') FROM i;",
    "+ wake_at_commit (after)": "INSERT INTO bench_commits_woken DEFAULT VALUES;",
    "outbox_emit (after)": "\\set agg random(1, 1000000)\n"
                           "SELECT compute.outbox_emit(NULL, 'bench', :agg::text, 'bench.tick', '{}');",
}
TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)


def pgbench(cluster: embedded.Cluster, script: Path, clients: int) -> float:
    """Transactions per second of `script` at `clients` clients for RUN_SECONDS."""
    argv = [str(embedded.pg_bindir() / "pgbench"), "-n", "-h", str(cluster.socketdir), "-p", str(cluster.port),
            "-U", cluster.user, "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(RUN_SECONDS),
            "-f", str(script), DBNAME]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    found = TPS.search(out)
    if found is None:
        raise RuntimeError(f"pgbench printed no tps:\n{out}")
    return float(found[1])


def curve(cluster: embedded.Cluster) -> dict[str, dict[int, float]]:
    """tps of each workload at each client count, the workloads taking turns per count."""
    rates: dict[str, dict[int, float]] = {name: {} for name in WORKLOADS}
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for number, (name, text) in enumerate(WORKLOADS.items()):
            scripts[name] = Path(folder) / f"{number}.sql"
            scripts[name].write_text(text + "\n")
        for clients in CLIENT_COUNTS:
            for name, script in scripts.items():
                rates[name][clients] = pgbench(cluster, script, clients)
                print(f"   {clients:>2} client(s) {name:<24} {rates[name][clients]:9.0f}/s", flush=True)
    return rates


def targets(rates: dict[str, dict[int, float]]) -> list[dict[str, object]]:
    top = max(CLIENT_COUNTS)
    wake, notify, plain = (rates[name][top] for name in ("+ wake_at_commit (after)", "+ NOTIFY (before)", "commit"))
    return [{"name": f"with fsync on, at {top} clients, committing is not flat-lined by NOTIFY",
             "measured": f"commits with the hint {wake:.0f}/s = {wake / plain:.2f} x commits without "
                         f"({plain:.0f}/s); with a plain NOTIFY {notify:.0f}/s = {notify / plain:.2f} x",
             "needs": f">= {TARGET_WAKE_TO_COMMIT_AT_16} x", "met": wake >= TARGET_WAKE_TO_COMMIT_AT_16 * plain}]


def print_report(report: dict[str, Any]) -> None:
    rates = report["per_second"]
    names = list(WORKLOADS)
    print()
    print(f"Commits/s with fsync on, one-statement transactions, pgbench, {RUN_SECONDS} s per point:")
    header = f"{'clients':>7} | " + " | ".join(f"{name:>24}" for name in names) + " | notify/commit | wake/commit"
    print(header)
    print("-" * len(header))
    for clients in CLIENT_COUNTS:
        row = [rates[name][str(clients)] for name in names]
        print(f"{clients:>7} | " + " | ".join(f"{rate:>24.0f}" for rate in row)
              + f" | {row[1] / row[0]:>13.2f} | {row[2] / row[0]:>11.2f}")
    print(f"Notifications the listener received: {report['notifications_received']:,}")
    for target in report["targets"]:
        print(f"Target {target['name']}: measured {target['measured']} (needs {target['needs']}) -> "
              f"{'MET' if target['met'] else 'NOT MET'}")
    print(machine_line(report["machine"]))
    print(f"Figures in {RESULTS.relative_to(ROOT)}")


@contextmanager
def listening(dsn: str) -> Iterator[list[int]]:
    """A session LISTENing on bc_outbox in a thread, as a worker does; yields [notifications received],
    final once the block ends."""
    received, stop = [0], threading.Event()

    def listen() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("LISTEN bc_outbox")
            while not stop.is_set():
                received[0] += sum(1 for _ in conn.notifies(timeout=0.5))
            received[0] += sum(1 for _ in conn.notifies(timeout=1))

    thread = threading.Thread(target=listen, name="listener")
    thread.start()
    try:
        yield received
    finally:
        stop.set()
        thread.join()


def main() -> int:
    load_at_start = os.getloadavg()
    with throwaway_cluster("bc-bench-notify-") as cluster:
        cluster.ensure_database(DBNAME)
        dsn = cluster.conninfo(DBNAME)
        print("-- migrate (fsync off), then restart with fsync on ...", flush=True)
        migrate.migrate(dsn)
        cluster.stop()
        cluster.start(fsync=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SHOW fsync").fetchone() == ("on",)
            conn.execute(SETUP)
        with listening(dsn) as received:
            rates = curve(cluster)
    report = {"per_second": {name: {str(c): round(r, 1) for c, r in by.items()} for name, by in rates.items()},
              "notifications_received": received[0], "targets": targets(rates), "machine": machine(load_at_start),
              "settings": {"run_seconds": RUN_SECONDS, "clients": list(CLIENT_COUNTS), "fsync": "on",
                           "workloads": WORKLOADS}, "measured_at": datetime.now(timezone.utc).isoformat()}
    write_section("notify", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
