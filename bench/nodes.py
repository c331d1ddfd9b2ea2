"""Node sessions benchmark (`make bench`; a measurement, not a test).

In one throwaway cluster: a gateway (`serve gateway`) and a worker (`serve worker`, which signs
specs) as processes, and `better-compute sim nodes` running NODES fake daemons (the real H200
capture) in one process against the gateway. Measures
  - how long the nodes take to join and connect, and how many sessions the gateway then holds;
  - heartbeat statements per second of the gateway (target <= 2: one batched statement per
    interval for all its sessions), and sessions written per statement;
  - spec-change-to-node-ack latency: a reservation is admitted (api.prepare + api.admit), and the
    clock runs until the booked node reports the new generation observed (worker signs, gateway
    pushes, daemon writes its CDI file and answers), p50/p99 over SPEC_SAMPLES reservations;
  - CPU milliseconds per acknowledgement of the gateway, the worker, the simulator and the server
    over that phase (two spec changes per sample, background work of the phase included).
Prints a table and writes the "nodes" section of .bc/bench.json. BC_BENCH_NODES=500 runs fewer
nodes (joining 5,000 takes ~10 min on the shared machine; the sessions target then reads NOT MET)
for comparisons run interleaved, base and change in turn (A B A B ...), the only fair ones on a
shared machine.

Where the acknowledgement's time goes (issue 11 E, docs/nodes.md "Verification hop"): since nodes
sign their reports and the worker verifies and applies them, the path has one more process hop:
gateway commits the report -> NOTIFY -> worker claims -> reads the pending report -> verifies ->
applies. Timed per hop (triggers with clock_timestamp, 500 nodes, load ~10-12), the hop added p50
~16 ms (p99s of its two parts 47 and 32 ms), nearly all of it wake-ups and round trips: three calls
(claim, read, apply), each BEGIN, statement, COMMIT, so 9 server round trips, plus a housekeeping
call when the round had a fan-out poke or periodic check to make first; each is a wake-up of a
process on a busy 2-CPU machine, and the p99 of their sum is the tail. Not the cause: a queue
backlog (at most one node.reports item live), an ack waiting for the node's previous run (as common
among the slowest 10 % as among all samples), the poll interval (claims follow the NOTIFY). Now each
call is one statement in autocommit (one round trip; this also shortens the gateway's and the
signing hops) and the worker claims before its housekeeping: 3 round trips on the hop. CPU per
acknowledgement includes the phase's background work, so it grows with the phase's length: compare
it within a pair only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from better_compute import migrate

from capacity import INVENTORY, Latencies
from common import ROOT, machine, machine_line, phase, throwaway_cluster, write_section

sys.path.insert(0, str(ROOT / "tests"))
from gateway_support import running_gateway, running_worker_process  # noqa: E402  (test support: real processes)

DBNAME = "bc_bench_nodes"
TENANT = "00000000-0000-4000-8000-0000000000bb"
NODES = int(os.environ.get("BC_BENCH_NODES", "5000"))  # fewer for a quick (interleaved) comparison; targets need 5000
TARGET_SESSIONS = 5000
TARGET_HEARTBEAT_STATEMENTS_PER_SECOND = 2.0
HEARTBEAT_SECONDS = 5
STEADY_SECONDS = 30
SPEC_SAMPLES = 200
CONNECT_TIMEOUT_SECONDS = 600
STATUS = re.compile(r"sim: (\d+)/(\d+) joined, (\d+) connected, (\d+) specs applied, (\d+) failed")
DECISION = {"allowed": True, "reason": "bench", "matched": [], "principal": "user:bench"}


def make_pool(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        site = conn.execute("SELECT compute.site_create('bench-nodes', %s)", (TENANT,)).fetchone()[0]
        pool = conn.execute("SELECT compute.pool_create(%s, 'h200', 'NVIDIA H200')", (site,)).fetchone()[0]
        conn.execute("SELECT compute.offering_create(%s, 'gpu', 1, interval '1 day')", (pool,))
    return str(pool)


class Sim:
    """`sim nodes` as a process; its latest status line."""

    def __init__(self, command: list[str]):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                                        env={**os.environ, "PYTHONPATH": str(ROOT / "py")})
        self.status: tuple[int, ...] = (0, NODES, 0, 0, 0)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if match := STATUS.search(line):
                self.status = tuple(int(group) for group in match.groups())

    def connected(self) -> int:
        return self.status[2]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_connected(sim: Sim, timings: dict[str, float]) -> None:
    started = time.monotonic()
    while sim.connected() < NODES and time.monotonic() - started < CONNECT_TIMEOUT_SECONDS and sim.process.poll() is None:
        time.sleep(1)
    timings["all connected after"] = round(time.monotonic() - started, 1)


def heartbeat_rate(gateway: Any) -> dict[str, float]:
    """Heartbeat statements and sessions written per second over STEADY_SECONDS."""
    before = gateway.metrics()
    time.sleep(STEADY_SECONDS)
    after = gateway.metrics()
    statements = after["bc_gateway_heartbeat_statements_total"] - before["bc_gateway_heartbeat_statements_total"]
    sessions = after["bc_gateway_heartbeat_sessions_total"] - before["bc_gateway_heartbeat_sessions_total"]
    return {"statements_per_second": round(statements / STEADY_SECONDS, 3),
            "sessions_per_statement": round(sessions / statements, 1) if statements else 0.0}


def spec_latencies(dsn: str, pool: str) -> Latencies:
    """Admit a reservation of one GPU, time until its node observes the generation it caused; release."""
    latencies = Latencies()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(SPEC_SAMPLES):
            end = conn.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
            request = {"pool_id": pool, "shape": "gpu", "count": 1, "end": end.isoformat()}
            prepared = conn.execute("SELECT api.prepare('reservations.create', %s, %s)", (TENANT, Jsonb(request))).fetchone()[0]
            started = time.perf_counter()
            answer = conn.execute("SELECT api.admit(%s, %s)", (prepared["admission_id"], Jsonb(DECISION))).fetchone()[0]
            node = conn.execute("SELECT node_id FROM compute.bookings WHERE reservation_id = %s",
                                (answer["data"]["reservation_id"],)).fetchone()[0]
            generation = conn.execute("SELECT generation FROM compute.node_specs WHERE node_id = %s", (node,)).fetchone()[0]
            while (conn.execute("SELECT observed_generation FROM compute.node_specs WHERE node_id = %s", (node,)).fetchone()[0]
                   or 0) < generation:
                if time.perf_counter() - started > 30:
                    break
                time.sleep(0.002)
            else:
                latencies.samples.append((time.perf_counter() - started) * 1000)
            conn.execute("SELECT compute.reservation_release(%s)", (answer["data"]["reservation_id"],))
    return latencies


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_processes(dsn: str) -> list[int]:
    """The postmaster of the throwaway cluster and its children (backends, WAL writer, ...)."""
    with psycopg.connect(dsn) as conn:
        data_directory = conn.execute("SHOW data_directory").fetchone()[0]
    postmaster = int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children")
    return [postmaster, *(int(pid) for pid in children.read_text().split())]


def cpu_by_process(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far per named group of processes (a process that ended meanwhile counts 0)."""
    def alive(pid: int) -> float:
        try:
            return cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
    return {name: sum(alive(pid) for pid in group) for name, group in pids.items()}


def cpu_per_ack(before: dict[str, float], after: dict[str, float], acks: int) -> dict[str, float]:
    """CPU milliseconds per acknowledgement during the spec phase, per process group: each sample is
    two spec changes (admit, release), each acknowledged; background work of the phase (heartbeats,
    drift checks, event fan-out) is included."""
    spent = {name: (after[name] - before[name]) * 1000 / acks for name in after}
    return {name: round(value, 2) for name, value in spent.items()} | {"total": round(sum(spent.values()), 2)}


def benchmark(dsn: str, scratch: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    with phase(timings, "migrate"):
        migrate.migrate(dsn)
    pool = make_pool(dsn)
    heartbeat = ["--heartbeat-seconds", str(HEARTBEAT_SECONDS), "--spec-poll-seconds", "30", "--pool-size", "8"]
    with running_gateway(dsn, scratch / "keys", heartbeat) as gateway, running_worker_process(dsn, gateway.keys) as worker:
        sim = Sim([sys.executable, "-m", "better_compute.cli.main", "sim", "nodes", "--count", str(NODES),
                   "--gateway", gateway.url, "--ca-file", str(gateway.ca_path), "--dsn", dsn, "--pool", pool,
                   "--state-root", str(scratch / "sim"), "--inventory", str(INVENTORY), "--status-seconds", "1"])
        try:
            with phase(timings, f"join and connect {NODES} nodes"):
                wait_connected(sim, timings)
            sessions = int(gateway.metrics()["bc_gateway_sessions"])
            with psycopg.connect(dsn) as conn:
                connected = conn.execute("SELECT count(*) FROM ops.nodes WHERE connected").fetchone()[0]
            with phase(timings, "steady heartbeats"):
                heartbeats = heartbeat_rate(gateway)
            pids = {"gateway": [gateway.server.process.pid], "worker": [worker.pid], "simulator": [sim.process.pid],
                    "postgres": server_processes(dsn)}
            with phase(timings, "spec latency"):
                cpu_before = cpu_by_process(pids)
                latencies = spec_latencies(dsn, pool)
                cpu = cpu_per_ack(cpu_before, cpu_by_process(pids), 2 * SPEC_SAMPLES)
        finally:
            sim.stop()
    return {
        "machine": machine(load_at_start),
        "nodes": NODES, "sessions_on_gateway": sessions, "connected_in_database": connected, "sim_status": list(sim.status),
        "heartbeats": heartbeats, "spec_to_ack": latencies.summary(), "cpu_ms_per_ack": cpu,
        "targets": [
            {"name": "sessions held by one gateway", "measured": sessions, "needs": f">= {TARGET_SESSIONS}",
             "met": sessions >= TARGET_SESSIONS},
            {"name": "heartbeat statements per second per gateway", "measured": heartbeats["statements_per_second"],
             "needs": f"<= {TARGET_HEARTBEAT_STATEMENTS_PER_SECOND}",
             "met": heartbeats["statements_per_second"] <= TARGET_HEARTBEAT_STATEMENTS_PER_SECOND},
        ],
        "settings": {"heartbeat_seconds": HEARTBEAT_SECONDS, "steady_seconds": STEADY_SECONDS, "spec_samples": SPEC_SAMPLES,
                     "processes": "gateway, worker and the simulator, each its own process, on this machine"},
        "timings_s": timings,
    }


def print_report(report: dict[str, Any]) -> None:
    spec = report["spec_to_ack"]
    print()
    print(f"Nodes: {report['nodes']} simulated (one process), {report['sessions_on_gateway']} sessions on one gateway, "
          f"{report['connected_in_database']} connected in the database; joined and connected in "
          f"{report['timings_s']['all connected after']} s")
    print(f"Heartbeats: {report['heartbeats']['statements_per_second']} statements/s "
          f"({report['heartbeats']['sessions_per_statement']} sessions per statement, one every {HEARTBEAT_SECONDS} s)")
    print(f"Spec change to node ack ({spec['count']} reservations): p50 {spec['p50_ms']} ms, p99 {spec['p99_ms']} ms, "
          f"max {spec['max_ms']} ms")
    print("CPU per acknowledgement (ms): " + ", ".join(f"{name} {value}" for name, value in report["cpu_ms_per_ack"].items()))
    for target in report["targets"]:
        print(f"Target {target['name']}: measured {target['measured']} (needs {target['needs']}) -> "
              f"{'MET' if target['met'] else 'NOT MET'}")
    print(machine_line(report["machine"]))


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch, throwaway_cluster("bc-bench-nodes-") as cluster:
        cluster.ensure_database(DBNAME)
        report = benchmark(cluster.conninfo(DBNAME), Path(scratch))
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("nodes", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
