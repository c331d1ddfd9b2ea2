"""API benchmark (`make bench`; a measurement, not a test).

In one throwaway cluster: a tenant's fleet (2 pools x 100 H200 nodes from the real inventory
fixture), then reservations admitted per second at 8 concurrent clients
  - through HTTP: `POST /api/compute/reservations/create` to a real `serve api` process (static
    IAM file: the embedded default), each request = api.prepare, one IAM decision, api.admit;
  - in the database: the same api.prepare + api.admit calls straight from 8 sessions, with the
    decision the relay would pass (what the relay costs on top is the ratio);
with latencies and conflicts. Prints a table and writes the "api" section of .bc/bench.json.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.types.json import Jsonb

from better_compute import migrate
from better_compute.errors import SQLSTATE_TO_CODE

from capacity import INVENTORY, POOL_POLICIES, RUN_SECONDS, ClientTally, RequestMaker, build_pool, measure
from common import ROOT, machine, machine_line, phase, throwaway_cluster, write_section

sys.path.insert(0, str(ROOT / "tests"))
from iam_server import statement, write_static_iam  # noqa: E402  (test support: the relay as a process)
from relay_support import running_relay, static_iam  # noqa: E402

DBNAME = "bc_bench_api"
TENANT = "00000000-0000-4000-8000-0000000000aa"
TOKEN = "bench-token"
NODES_PER_POOL = 100
CLIENTS = 8
RELAY_POOL_SIZE = 16
DECISION = {"allowed": True, "reason": "bench", "matched": [], "principal": "user:bench"}


def build_fleet(dsn: str) -> list[str]:
    template = json.loads(INVENTORY.read_text())
    return [build_pool(dsn, number, POOL_POLICIES[number], template, TENANT, NODES_PER_POOL) for number in (0, 2)]


def api_request(maker: RequestMaker) -> dict[str, Any]:
    """A reservations.create input: the capacity bench's random request, the tenant from the caller."""
    return {key: value for key, value in maker.request().items() if key != "tenant_id"}


def http_client(url: str, maker: RequestMaker, stop_at: float, tally: ClientTally) -> None:
    headers = {"X-Better-Compute": "1", "Authorization": f"Bearer {TOKEN}", "X-Tenant-Id": TENANT}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            answer = client.post("/api/compute/reservations/create", json=api_request(maker))
            if answer.status_code != 200:
                error = answer.json()["error"]
                (tally.conflicts if answer.status_code == 409 else tally.errors)[f"{error['code']}: {(error['hint'] or '')[:50]}"] += 1
                continue
            tally.success(started)


def database_client(dsn: str, maker: RequestMaker, stop_at: float, tally: ClientTally) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                prepared = conn.execute("SELECT api.prepare('reservations.create', %s, %s)",
                                        (TENANT, Jsonb(api_request(maker)))).fetchone()[0]
                answer = conn.execute("SELECT api.admit(%s, %s)", (prepared["admission_id"], Jsonb(DECISION))).fetchone()[0]
            except psycopg.Error as error:
                conflict = SQLSTATE_TO_CODE.get(error.sqlstate or "", ("",))[0] == "CAPACITY_CONFLICT"
                (tally.conflicts if conflict else tally.errors)[f"{error.sqlstate}: {(error.diag.message_hint or '')[:50]}"] += 1
                continue
            if "error" in answer:
                tally.errors[answer["error"]["code"]] += 1
                continue
            tally.success(started)


def makers(pools: list[str], seed: float) -> list[RequestMaker]:
    rng = random.Random(seed)
    return [RequestMaker(pools, 0, random.Random(rng.random())) for _ in range(CLIENTS)]


def benchmark(dsn: str, iam_file: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    with phase(timings, "migrate"):
        migrate.migrate(dsn)
    with phase(timings, "build fleet"):
        pools = build_fleet(dsn)
    with phase(timings, "in the database"):
        clients = makers(pools, 1)
        database = measure("database", CLIENTS, lambda i, stop, tally: database_client(dsn, clients[i], stop, tally))
    with phase(timings, "through HTTP"), running_relay(dsn, static_iam(iam_file), ["--pool-size", str(RELAY_POOL_SIZE)]) as relay:
        clients = makers(pools, 2)
        http = measure("http", CLIENTS, lambda i, stop, tally: http_client(relay.url, clients[i], stop, tally))
    ratio = http.per_second / database.per_second if database.per_second else 0.0
    return {"machine": machine(load_at_start), "runs": [database.as_json(), http.as_json()], "ratio_http_to_database": round(ratio, 3),
            "settings": {"clients": CLIENTS, "run_seconds": RUN_SECONDS, "pools": len(pools), "nodes_per_pool": NODES_PER_POOL,
                         "relay_pool_size": RELAY_POOL_SIZE, "iam": "static file (embedded default)",
                         "cluster": "embedded throwaway cluster, fsync=off, default settings otherwise"},
            "timings_s": timings}


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"reservations.create at {CLIENTS} clients, {RUN_SECONDS} s each (prepare + IAM + admit):")
    header = f"{'path':>10} | {'reserv/s':>8} | {'conflicts':>9} | {'errors':>6} | {'p50 ms':>7} | {'p99 ms':>7}"
    print(header)
    print("-" * len(header))
    for run in report["runs"]:
        print(f"{run['workload']:>10} | {run['per_second']:>8.1f} | {run['conflict_rate']:>9.1%} | {sum(run['errors'].values()):>6} | "
              f"{run['latency']['p50_ms']!s:>7} | {run['latency']['p99_ms']!s:>7}")
        for outcome, count in sorted((run["conflicts"] | run["errors"]).items()):
            print(f"  {run['workload']}: {count} x {outcome}")
    print(f"HTTP / in-database: {report['ratio_http_to_database']}")
    print(machine_line(report["machine"]))


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch, throwaway_cluster("bc-bench-api-") as cluster:
        iam_file = write_static_iam(Path(scratch) / "iam.toml", [(TOKEN, "user:bench", TENANT, [statement("allow")])])
        cluster.ensure_database(DBNAME)
        report = benchmark(cluster.conninfo(DBNAME), iam_file)
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("api", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
