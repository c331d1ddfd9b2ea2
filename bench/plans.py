"""Plans on a growing fleet (`make bench`; a measurement, not a test). docs/capacity.md, "Plans on a
growing fleet".

A new deployment starts with empty tables, and the relay, gateway and worker keep pooled
connections for hours. In one throwaway cluster with autovacuum off (so that nothing but what is
measured analyses a table), a 1,200-GPU fleet is built once and copied into three databases that then
grow in lock-step, by GROWTH_PER_QUARTER bookings per atom (history rows straight into the tables,
about 25,000) before each of four quarters, to about 100,000 bookings:
  - growing:  CLIENTS connections opened on the empty tables and kept to the end (WARM_UP admissions
              each first, so that PL/pgSQL caches its plans on empty tables); after each growth the
              worker's periodic step runs (worker_api.tables_analyze, what `tables.analyze` does
              every 30 s);
  - fresh:    the same data with fresh statistics: ANALYZE and new connections (warmed up) in every
              quarter;
  - before:   like growing, on the schema as it stood before this change (no statistics on atoms'
              validity, generic plans for the candidate scan) and without the worker step: the state
              the issue measured.
In each quarter the three take turns, ROUNDS times ADMISSIONS_PER_TURN admissions (reserve, then
activate) per connection, so that load from elsewhere on the machine hits them alike. Cost is the
server CPU time of the backends (utime + stime from /proc/<pid>/stat), not wall time.
Target: CPU per admission of growing / fresh in the last quarter <= TARGET_RATIO.
Writes the "plans" section of .bc/bench.json.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from better_compute import embedded, migrate

from capacity import INVENTORY, TENANTS, TENANTS_PER_CLIENT, RequestMaker, build_pool, set_quotas
from common import ROOT, machine, machine_line, phase, throwaway_cluster, write_section

sys.path.insert(0, str(ROOT / "tests"))
from booking_history import add_history  # noqa: E402  (test support: bookings in bulk)

EMPTY_DBNAME = "bc_bench_plans_empty"     # the fleet with no bookings, template of the three
RUNS = ("growing", "fresh", "before")
POOLS = (("pack", 75), ("spread", 75))    # x 8 H200 = 1,200 GPUs
CLIENTS = 2
WARM_UP = 20
ROUNDS, ADMISSIONS_PER_TURN = 8, 30       # per quarter and connection: 240 admissions
GROWTH_PER_QUARTER = 14                   # bookings per atom: x 1,800 atoms = 25,200 per quarter
QUARTERS = 4
TARGET_RATIO = 1.2
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
# What the schema was before plans_follow_table_growth (migrations/revert/plans_follow_table_growth.sql).
BEFORE_THIS_CHANGE = ("DROP STATISTICS compute.atoms_validity",
                      "ALTER FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint) RESET plan_cache_mode")


@dataclass
class Backend:
    """One client connection and its server process."""

    conn: psycopg.Connection
    pid: int
    maker: RequestMaker

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICK

    def admit(self, count: int) -> int:
        """`count` admissions (reserve, then activate, one transaction each); returns how many succeeded."""
        admitted = 0
        for _ in range(count):
            try:
                document = self.conn.execute("SELECT compute.reserve(%s)", (Jsonb(self.maker.request()),)).fetchone()[0]
                self.conn.execute("SELECT compute.reservation_activate(%s)", (document["reservation_id"],))
                admitted += 1
            except psycopg.Error:
                continue
        return admitted


@dataclass
class Run:
    """One of the three databases, its connections, and its CPU and admissions in the current quarter."""

    name: str
    dsn: str
    backends: list[Backend] = field(default_factory=list)
    cpu_seconds: float = 0.0
    admitted: int = 0

    def connect(self, pools: list[str], rng: random.Random) -> None:
        """New connections (closing any), each warmed up."""
        self.close()
        for i in range(CLIENTS):
            conn = psycopg.connect(self.dsn, autocommit=True)
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            self.backends.append(Backend(conn, pid, RequestMaker(pools, i * TENANTS_PER_CLIENT, random.Random(rng.random()))))
        for backend in self.backends:
            backend.admit(WARM_UP)

    def close(self) -> None:
        for backend in self.backends:
            backend.conn.close()
        self.backends = []

    def turn(self) -> None:
        """ADMISSIONS_PER_TURN admissions on each connection, counted."""
        before = sum(b.cpu_seconds() for b in self.backends)
        self.admitted += sum(b.admit(ADMISSIONS_PER_TURN) for b in self.backends)
        self.cpu_seconds += sum(b.cpu_seconds() for b in self.backends) - before

    def grow(self, pools: list[str], quarter: int, rng: random.Random) -> int:
        """The quarter's bookings, then what this run does about statistics; returns the tables the worker
        step analysed (0 for the runs without it)."""
        add_history(self.dsn, pools, GROWTH_PER_QUARTER, quarter * GROWTH_PER_QUARTER, TENANTS)
        self.cpu_seconds, self.admitted = 0.0, 0
        if self.name == "before":
            return 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            if self.name == "growing":
                return conn.execute("SELECT worker_api.tables_analyze()").fetchone()[0]
            conn.execute("ANALYZE")
        self.connect(pools, rng)
        return 0

    def quarter(self) -> dict[str, Any]:
        with psycopg.connect(self.dsn) as conn:
            count = conn.execute("SELECT count(*) FROM compute.bookings").fetchone()[0]
        return {"bookings": count, "admitted": self.admitted,
                "cpu_ms_per_admission": round(self.cpu_seconds * 1000 / max(self.admitted, 1), 3)}


def build(cluster: embedded.Cluster) -> list[str]:
    """The empty fleet (no ANALYZE) with quotas, copied for each run; autovacuum off."""
    dsn = cluster.conninfo(EMPTY_DBNAME)
    cluster.ensure_database(EMPTY_DBNAME)
    migrate.migrate(dsn)
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_catalog.pg_reload_conf()")
    template = json.loads(INVENTORY.read_text())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT compute.site_create('bench-site')")
    pools = [build_pool(dsn, number, policy, template, nodes=nodes) for number, (policy, nodes) in enumerate(POOLS, start=1)]
    set_quotas(dsn)
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_terminate_backend(pid, 5000) FROM pg_catalog.pg_stat_activity WHERE datname = %s",
                     (EMPTY_DBNAME,))
        for name in RUNS:
            conn.execute(f"CREATE DATABASE bc_bench_plans_{name} TEMPLATE {EMPTY_DBNAME}")
    with psycopg.connect(cluster.conninfo("bc_bench_plans_before"), autocommit=True) as conn:
        for statement in BEFORE_THIS_CHANGE:
            conn.execute(statement)
    return pools


def benchmark(cluster: embedded.Cluster) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    rng = random.Random(20261201)
    with phase(timings, "build the empty fleet"):
        pools = build(cluster)
    runs = [Run(name, cluster.conninfo(f"bc_bench_plans_{name}")) for name in RUNS]
    quarters: dict[str, list[dict[str, Any]]] = {name: [] for name in RUNS}
    with phase(timings, "four quarters of growth"):
        for run in runs:
            run.connect(pools, rng)              # on empty tables; only "fresh" reconnects later
        for quarter in range(QUARTERS):
            analysed = {run.name: run.grow(pools, quarter, rng) for run in runs}
            for _ in range(ROUNDS):
                for run in runs:
                    run.turn()
            for run in runs:
                quarters[run.name].append({"quarter": quarter + 1, **run.quarter()})
            print("   quarter {}: {}; tables analysed by the worker step: {}".format(
                quarter + 1, ", ".join(f"{name} {q[-1]['cpu_ms_per_admission']:.2f} ms" for name, q in quarters.items()),
                analysed["growing"]), flush=True)
        for run in runs:
            run.close()
    ratios = {name: [round(q["cpu_ms_per_admission"] / f["cpu_ms_per_admission"], 3)
                     for q, f in zip(quarters[name], quarters["fresh"], strict=True)] for name in ("growing", "before")}
    last = ratios["growing"][-1]
    return {
        "machine": machine(load_at_start),
        "fleet": {"pools": [{"policy": policy, "nodes": nodes} for policy, nodes in POOLS], "gpus": sum(n for _, n in POOLS) * 8},
        "settings": {"clients": CLIENTS, "warm_up": WARM_UP, "admissions_per_quarter_per_client": ROUNDS * ADMISSIONS_PER_TURN,
                     "bookings_per_atom_per_quarter": GROWTH_PER_QUARTER, "autovacuum": "off",
                     "cpu": "utime + stime of the client backends (/proc/<pid>/stat)"},
        "quarters": quarters,
        "ratio_to_fresh": ratios,
        "target": {"name": f"CPU per admission, last quarter, growing / fresh statistics <= {TARGET_RATIO}",
                   "measured": last, "met": last <= TARGET_RATIO},
        "timings_s": timings,
    }


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"Fleet: {report['fleet']['gpus']} H200 GPUs in {len(POOLS)} pools; {CLIENTS} connections per run; per quarter "
          f"about 25,000 bookings added, then {ROUNDS * ADMISSIONS_PER_TURN} admissions per connection, the runs taking turns. "
          f"Server CPU ms per admission (autovacuum off):")
    print(f"  {'quarter':>7} | {'bookings':>8} | {'growing':>7} | {'fresh':>7} | {'before':>7} | growing/fresh | before/fresh")
    for i, fresh in enumerate(report["quarters"]["fresh"]):
        growing, before = report["quarters"]["growing"][i], report["quarters"]["before"][i]
        print(f"  {i + 1:>7} | {fresh['bookings']:>8,} | {growing['cpu_ms_per_admission']:>7.2f} | {fresh['cpu_ms_per_admission']:>7.2f} | "
              f"{before['cpu_ms_per_admission']:>7.2f} | {report['ratio_to_fresh']['growing'][i]:>13.2f} | "
              f"{report['ratio_to_fresh']['before'][i]:>12.2f}")
    target = report["target"]
    print(f"Target {target['name']}: measured {target['measured']} -> {'MET' if target['met'] else 'NOT MET'}")
    print(machine_line(report["machine"]))
    print("Phases: " + ", ".join(f"{k} {v} s" for k, v in report["timings_s"].items()))


def main() -> int:
    with throwaway_cluster("bc-bench-plans-") as cluster:
        report = benchmark(cluster)
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("plans", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
