"""Plans on a growing fleet (`make bench`; a measurement, not a test). docs/capacity.md, "Plans on a
growing fleet".

A new deployment starts with empty tables, and the relay, gateway and worker keep pooled
connections for hours. In one throwaway cluster with autovacuum off (so that nothing but what is
measured analyses a table), build a 1,200-GPU fleet; then, on CLIENTS long-lived connections opened
while bookings is empty:
  - warm up: WARM_UP admissions each, so that PL/pgSQL caches its plans on empty tables;
  - four quarters, each: add GROWTH_PER_QUARTER bookings (history rows, straight into the tables),
    run the worker's periodic step (worker_api.tables_analyze, what `tables.analyze` does every
    30 s), then ADMISSIONS_PER_QUARTER admissions per connection (reserve, then activate);
  - then, on the same data, ANALYZE and new connections ("fresh statistics"), the same admissions.
Each admission's cost is the server CPU time of its backend (utime + stime from /proc/<pid>/stat),
not wall time: the machine is shared. The same run is made on a copy of the empty fleet as the schema
stood before this change (no statistics on atoms' validity, generic plans for the candidate scan,
no worker step): the state the issue measured.
Target: CPU per admission in the last quarter <= TARGET_RATIO x with fresh statistics.
Writes the "plans" section of .bc/bench.json.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from better_compute import embedded, migrate

from capacity import INVENTORY, TENANTS, TENANTS_PER_CLIENT, RequestMaker, build_pool, set_quotas
from common import ROOT, machine, machine_line, phase, throwaway_cluster, write_section

sys.path.insert(0, str(ROOT / "tests"))
from booking_history import add_history  # noqa: E402  (test support: bookings in bulk)

DBNAME = "bc_bench_plans"
EMPTY_DBNAME = "bc_bench_plans_empty"     # the fleet with no bookings, template of both runs
BEFORE_DBNAME = "bc_bench_plans_before"
POOLS = (("pack", 75), ("spread", 75))    # x 8 H200 = 1,200 GPUs
CLIENTS = 2
WARM_UP = 20
ADMISSIONS_PER_QUARTER = 150
GROWTH_PER_QUARTER = 14                   # bookings per atom: x 1,800 atoms = 25,200 per quarter
QUARTERS = 4
TARGET_RATIO = 1.2
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
# What the schema was before plans_follow_table_growth (migrations/revert/plans_follow_table_growth.sql).
BEFORE_THIS_CHANGE = ("DROP STATISTICS compute.atoms_validity",
                      "ALTER FUNCTION compute.place_candidates(uuid, text, tstzrange, boolean, uuid[], bigint) RESET plan_cache_mode")


@dataclass
class Backend:
    """One long-lived client connection and its server process."""

    conn: psycopg.Connection
    pid: int
    maker: RequestMaker

    def cpu_seconds(self) -> float:
        fields = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
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


def connect(dsn: str, pools: list[str], rng: random.Random) -> list[Backend]:
    backends = []
    for i in range(CLIENTS):
        conn = psycopg.connect(dsn, autocommit=True)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        backends.append(Backend(conn, pid, RequestMaker(pools, i * TENANTS_PER_CLIENT, random.Random(rng.random()))))
    return backends


def measured(backends: list[Backend], count: int) -> dict[str, float]:
    """`count` admissions on each backend, one backend after the other; server CPU ms per admission."""
    before = sum(b.cpu_seconds() for b in backends)
    admitted = sum(b.admit(count) for b in backends)
    cpu = sum(b.cpu_seconds() for b in backends) - before
    return {"admitted": admitted, "cpu_ms_per_admission": round(cpu * 1000 / max(admitted, 1), 3)}


def bookings(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM compute.bookings").fetchone()[0]


def growing_run(dsn: str, pools: list[str], rng: random.Random, worker_step: bool) -> list[dict[str, Any]]:
    """Long-lived connections from empty tables through four quarters of growth."""
    backends = connect(dsn, pools, rng)
    for backend in backends:
        backend.admit(WARM_UP)
    quarters = []
    for quarter in range(QUARTERS):
        add_history(dsn, pools, GROWTH_PER_QUARTER, quarter * GROWTH_PER_QUARTER, TENANTS)
        analysed = 0
        if worker_step:
            with psycopg.connect(dsn, autocommit=True) as conn:
                analysed = conn.execute("SELECT worker_api.tables_analyze()").fetchone()[0]
        quarters.append({"quarter": quarter + 1, "bookings": bookings(dsn), "tables_analysed": analysed,
                         **measured(backends, ADMISSIONS_PER_QUARTER)})
        print(f"   quarter {quarter + 1}: {quarters[-1]}", flush=True)
    for backend in backends:
        backend.conn.close()
    return quarters


def fresh_run(dsn: str, pools: list[str], rng: random.Random) -> dict[str, Any]:
    """The same data, analysed, on new connections."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    backends = connect(dsn, pools, rng)
    for backend in backends:
        backend.admit(WARM_UP)
    result = {"bookings": bookings(dsn), **measured(backends, ADMISSIONS_PER_QUARTER)}
    for backend in backends:
        backend.conn.close()
    print(f"   fresh statistics: {result}", flush=True)
    return result


def build(cluster: embedded.Cluster) -> list[str]:
    """The empty fleet in EMPTY_DBNAME (no ANALYZE), with quotas; then autovacuum off."""
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
        for copy in (DBNAME, BEFORE_DBNAME):
            conn.execute(f"CREATE DATABASE {copy} TEMPLATE {EMPTY_DBNAME}")
    with psycopg.connect(cluster.conninfo(BEFORE_DBNAME), autocommit=True) as conn:
        for statement in BEFORE_THIS_CHANGE:
            conn.execute(statement)
    return pools


def summary(quarters: list[dict[str, Any]], fresh: dict[str, Any]) -> dict[str, Any]:
    return {"quarters": quarters, "fresh_statistics": fresh,
            "last_quarter_to_fresh": round(quarters[-1]["cpu_ms_per_admission"] / fresh["cpu_ms_per_admission"], 3)}


def benchmark(cluster: embedded.Cluster) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    rng = random.Random(20261201)
    with phase(timings, "build the empty fleet"):
        pools = build(cluster)
    with phase(timings, "growing run, before this change"):
        before_quarters = growing_run(cluster.conninfo(BEFORE_DBNAME), pools, rng, worker_step=False)
    with phase(timings, "fresh statistics, before this change"):
        before_fresh = fresh_run(cluster.conninfo(BEFORE_DBNAME), pools, rng)
    with phase(timings, "growing run"):
        quarters = growing_run(cluster.conninfo(DBNAME), pools, rng, worker_step=True)
    with phase(timings, "fresh statistics"):
        fresh = fresh_run(cluster.conninfo(DBNAME), pools, rng)
    now = summary(quarters, fresh)
    return {
        "machine": machine(load_at_start),
        "fleet": {"pools": [{"policy": policy, "nodes": nodes} for policy, nodes in POOLS], "gpus": sum(n for _, n in POOLS) * 8},
        "settings": {"clients": CLIENTS, "warm_up": WARM_UP, "admissions_per_quarter_per_client": ADMISSIONS_PER_QUARTER,
                     "bookings_per_atom_per_quarter": GROWTH_PER_QUARTER, "autovacuum": "off",
                     "cpu": "utime + stime of the client backends (/proc/<pid>/stat)"},
        "growing": now,
        "before_this_change": summary(before_quarters, before_fresh),
        "target": {"name": f"CPU per admission in the last quarter <= {TARGET_RATIO} x with fresh statistics",
                   "measured": now["last_quarter_to_fresh"], "met": now["last_quarter_to_fresh"] <= TARGET_RATIO},
        "timings_s": timings,
    }


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"Fleet: {report['fleet']['gpus']} H200 GPUs, {len(POOLS)} pools; {CLIENTS} long-lived connections opened on empty "
          f"tables, {WARM_UP} admissions each to warm up, then per quarter: bookings grown, {ADMISSIONS_PER_QUARTER} "
          f"admissions each. Server CPU ms per admission (autovacuum off).")
    for label, run in (("this schema", report["growing"]), ("before this change", report["before_this_change"])):
        cells = " / ".join(f"{q['cpu_ms_per_admission']:.2f} ({q['bookings']:,})" for q in run["quarters"])
        print(f"  {label:<19} by quarter (bookings): {cells}; fresh statistics {run['fresh_statistics']['cpu_ms_per_admission']:.2f};"
              f" last quarter / fresh {run['last_quarter_to_fresh']:.2f}")
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
