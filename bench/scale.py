"""Relays side by side (`make bench-scale`; a measurement, not a test; issue 18 part 5).

Reservations admitted per second at 8 concurrent clients through 1 API relay, then through 2 relays
(`serve api` processes, clients split between them), against one database. Both runs start from
the same fleet (bench/api.py's: 2 pools x 100 H200 nodes), a copy of one template database each, so
the second run does not meet the first run's bookings. Prints the table and the ratio (2 relays /
1 relay) and writes the "scale" section of .bc/bench.json.

What it tells: whether the relay is what bounds the rate. On a machine where PostgreSQL and the
relays share the same few CPUs the ratio stays near 1: the database is the bound, and more relays
only help when they run on other machines (docs/scale.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from better_compute import embedded, migrate

from api import CLIENTS, RELAY_POOL_SIZE, TENANT, TOKEN, build_fleet, http_client, makers
from capacity import RUN_SECONDS, RunResult, measure
from common import ROOT, machine, machine_line, phase, throwaway_cluster, write_section

sys.path.insert(0, str(ROOT / "tests"))
from iam_server import statement, write_static_iam  # noqa: E402  (test support: the relay as a process)
from relay_support import running_relay, static_iam  # noqa: E402

FLEET_DBNAME = "bc_bench_scale_fleet"
RELAY_COUNTS = (1, 2)


def copy_of_fleet(cluster: embedded.Cluster, name: str) -> str:
    """A new database `name` copied from the fleet template (which must have no session); its conninfo."""
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_terminate_backend(pid, 5000) FROM pg_catalog.pg_stat_activity WHERE datname = %s",
                     (FLEET_DBNAME,))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(FLEET_DBNAME)))
    return cluster.conninfo(name)


def through_relays(dsn: str, iam_file: Path, pools: list[str], relays: int) -> RunResult:
    """CLIENTS clients for RUN_SECONDS, client i on relay i mod `relays`."""
    with ExitStack() as stack:
        urls = [stack.enter_context(running_relay(dsn, static_iam(iam_file), ["--pool-size", str(RELAY_POOL_SIZE)])).url
                for _ in range(relays)]
        clients = makers(pools, 2)
        return measure(f"{relays} relay{'s' if relays > 1 else ''}", CLIENTS,
                       lambda i, stop, tally: http_client(urls[i % relays], clients[i], stop, tally))


def benchmark(cluster: embedded.Cluster, iam_file: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    cluster.ensure_database(FLEET_DBNAME)
    with phase(timings, "migrate and build the fleet"):
        migrate.migrate(cluster.conninfo(FLEET_DBNAME))
        pools = build_fleet(cluster.conninfo(FLEET_DBNAME))
    runs = []
    for relays in RELAY_COUNTS:
        with phase(timings, f"through {relays} relay(s)"):
            runs.append(through_relays(copy_of_fleet(cluster, f"bc_bench_scale_{relays}"), iam_file, pools, relays))
    one, two = (run.per_second for run in runs)
    return {"machine": machine(load_at_start), "runs": [run.as_json() for run in runs],
            "ratio_2_relays_to_1": round(two / one, 3) if one else 0.0,
            "settings": {"clients": CLIENTS, "run_seconds": RUN_SECONDS, "relay_pool_size": RELAY_POOL_SIZE,
                         "fleet": "bench/api.py's (2 pools x 100 H200 nodes), a fresh copy per run",
                         "iam": "static file (embedded default)", "cluster": "embedded throwaway cluster, fsync=off"},
            "timings_s": timings}


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"reservations.create at {CLIENTS} clients, {RUN_SECONDS} s each, clients split over the relays:")
    header = f"{'relays':>8} | {'reserv/s':>8} | {'conflicts':>9} | {'errors':>6} | {'p50 ms':>7} | {'p99 ms':>7}"
    print(header)
    print("-" * len(header))
    for run in report["runs"]:
        print(f"{run['workload']:>8} | {run['per_second']:>8.1f} | {run['conflict_rate']:>9.1%} | {sum(run['errors'].values()):>6} | "
              f"{run['latency']['p50_ms']!s:>7} | {run['latency']['p99_ms']!s:>7}")
    print(f"2 relays / 1 relay: {report['ratio_2_relays_to_1']}")
    print(machine_line(report["machine"]))


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch, throwaway_cluster("bc-bench-scale-") as cluster:
        iam_file = write_static_iam(Path(scratch) / "iam.toml", [(TOKEN, "user:bench", TENANT, [statement("allow")])])
        report = benchmark(cluster, iam_file)
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("scale", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
