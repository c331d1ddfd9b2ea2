"""Worker benchmark (`make bench`, after bench/capacity.py; a measurement, not a test).

In one throwaway cluster, with real worker processes already waiting (LISTEN) when the work is
committed in one statement; the clock starts at that commit, and the database is polled every
POLL_SECONDS:
  - outbox -> webhooks: EVENTS events of WEBHOOK_TENANTS tenants, each tenant with one webhook to a
    local HTTP receiver that checks every signature and answers 200; one `better-compute serve
    worker` process. Fan-out: until every delivery exists; end to end: until every delivery is
    recorded delivered (and the receiver has seen each delivery id).
  - work queue: WORK_ITEMS no-op items of kind NOOP_KIND, drained by 1, then 4, worker processes
    (the `serve worker` handlers plus a no-op one, WORK_CONCURRENCY items at once each).
Prints a table and writes the "worker" section of .bc/bench.json.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg

from better_compute import embedded, migrate
from better_compute.audit import AuditSigner
from better_compute.cli.serve import POOL_SPARE_CONNECTIONS, WORKER_ROLE
from better_compute.clock import Clock
from better_compute.db import Database
from better_compute.pki import IntentSigner
from better_compute.ports.ledger import LocalLedger
from better_compute.sealing import SecretKeyring
from better_compute.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSender, verify_signature
from better_compute.worker.handlers import default_handlers
from better_compute.worker.runtime import Worker, WorkerSettings, WorkItem, run_until_signalled

from common import RESULTS, ROOT, TENANT_ID_SQL, machine, machine_line, phase, tenant_id, throwaway_cluster, write_section

DBNAME = "bc_bench_worker"
BETTER_COMPUTE = Path(sys.executable).parent / "better-compute"
WORKER_LOG = ROOT / ".bc" / "bench-worker.log"
NOOP_WORKER = "noop-worker"  # argv[1] of this script when it runs as one work-queue worker process

EVENTS = 20_000
WEBHOOK_TENANTS = 4  # 5,000 events a webhook: below deliveries_pending_per_webhook (10,000), past which deliveries die
SERVE_CONCURRENCY = 8  # `serve worker`'s default
# Each claim scans and sorts compute.work (sql/400_work.sql: its ORDER BY and its OR of due / lease
# expired match no index), so items/s falls as the table grows: on 2 CPUs, 20,000 items drained at
# about 175/s with 1 worker and 200/s with 4, 2,000 at 500/s and 1,000/s. 5,000 keeps this part short.
WORK_ITEMS = 5_000
NOOP_KIND = "bench.noop"
WORKER_COUNTS = (1, 4)
WORK_CONCURRENCY = 4

POLL_SECONDS = 0.1
READY_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
SIGNATURE_TOLERANCE_S = 300.0


# -- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    """`items` handled by `workers` processes (each running `concurrency` items at once) in `seconds`."""

    measure: str
    workers: int
    concurrency: int
    items: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.items / self.seconds

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "seconds": round(self.seconds, 2), "per_second": round(self.per_second, 1)}


# -- the webhook receiver --------------------------------------------------------------------------


class Receiver(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that checks each request's signature with the secret of its path
    and answers 200 (401 to a bad signature, which the worker retries 30 s later)."""

    daemon_threads = True

    def __init__(self, secrets_by_path: dict[str, str]):
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.secrets_by_path = secrets_by_path
        self.lock = threading.Lock()
        self.delivery_ids: set[str] = set()
        self.requests = 0
        self.bad_signatures = 0

    def url(self, path: str) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{path}"

    def accept(self, path: str, headers: HTTPMessage, body: bytes) -> bool:
        secret = self.secrets_by_path.get(path)
        valid = secret is not None and verify_signature(secret, headers.get(TIMESTAMP_HEADER, ""), body,
                                                        headers.get(SIGNATURE_HEADER, ""), SIGNATURE_TOLERANCE_S)
        with self.lock:
            self.requests += 1
            if valid:
                self.delivery_ids.add(headers.get(DELIVERY_HEADER, ""))
            else:
                self.bad_signatures += 1
        return valid

    def tally(self) -> dict[str, int]:
        with self.lock:
            return {"requests": self.requests, "distinct_deliveries": len(self.delivery_ids),
                    "bad_signatures": self.bad_signatures}


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200 if self.server.accept(self.path, self.headers, body) else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def receiving(secrets_by_path: dict[str, str]) -> Iterator[Receiver]:
    receiver = Receiver(secrets_by_path)
    threading.Thread(target=receiver.serve_forever, name="receiver", daemon=True).start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()


# -- worker processes ------------------------------------------------------------------------------


def named(dsn: str, owner: str) -> str:
    """The DSN with application_name = owner, so that pg_stat_activity tells the processes apart."""
    return f"{dsn} application_name={owner}"


def serve_worker_command(dsn: str, owner: str, audit_key: Path) -> list[str]:
    return [str(BETTER_COMPUTE), "serve", "worker", "--dsn", named(dsn, owner), "--owner", owner,
            "--concurrency", str(SERVE_CONCURRENCY), "--audit-key", str(audit_key), "--intent-key", str(intent_key_beside(audit_key)),
            "--webhook-key", str(webhook_keys_beside(audit_key).current_path),
            "--webhooks-to-private-addresses"]  # the receiver listens on 127.0.0.1


def intent_key_beside(audit_key: Path) -> Path:
    """The workers' intent key (node specs and commands are signed with it), in the cluster's folder too."""
    return audit_key.with_name("intent-ed25519.pem")


def webhook_keys_beside(audit_key: Path) -> SecretKeyring:
    """The workers' webhook key (secrets are sealed to it), in the cluster's folder too."""
    return SecretKeyring(audit_key.with_name("webhook-x25519.pem"))


def noop_worker_command(dsn: str, owner: str, audit_key: Path) -> list[str]:
    return [sys.executable, __file__, NOOP_WORKER, named(dsn, owner), owner, str(audit_key)]


def serve_noop_worker(dsn: str, owner: str, audit_key: str) -> None:
    """One worker process composed as `serve worker` composes it (role, pool size, handlers), plus a
    handler that does nothing for NOOP_KIND; SIGTERM stops it gracefully."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db = Database(dsn, max_size=WORK_CONCURRENCY + POOL_SPARE_CONNECTIONS, name=owner, role=WORKER_ROLE)
    with db:
        with db.pool.connection() as conn:
            clock = Clock.anchored(conn, "worker_api.now")
        sender = WebhookSender(clock, private_addresses=True)  # the benchmark's receivers listen on 127.0.0.1
        handlers = default_handlers(db, LocalLedger(db), sender, AuditSigner(audit_key),
                                    IntentSigner(intent_key_beside(Path(audit_key))), webhook_keys_beside(Path(audit_key)))
        run_until_signalled(Worker(db, {**handlers, NOOP_KIND: noop}, WorkerSettings(owner, WORK_CONCURRENCY)))


def noop(_item: WorkItem) -> None:
    return None


@contextmanager
def worker_processes(dsn: str, commands: dict[str, list[str]]) -> Iterator[None]:
    """One process per owner, output to WORKER_LOG; yields once each LISTENs. On exit each gets
    SIGTERM (a graceful stop) and must exit 0."""
    with WORKER_LOG.open("a") as log:
        processes = {owner: subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                     for owner, command in commands.items()}
        try:
            wait_until(lambda: listening(dsn, processes), READY_TIMEOUT_S, f"{len(processes)} worker(s) to LISTEN")
            yield
        finally:
            stop(processes)


def listening(dsn: str, processes: dict[str, subprocess.Popen[bytes]]) -> bool:
    """Whether every worker's listener has run its last LISTEN; a worker that exited is an error."""
    for owner, process in processes.items():
        if process.poll() is not None:
            raise RuntimeError(f"worker {owner} exited {process.returncode} at start; see {WORKER_LOG}")
    with psycopg.connect(dsn) as conn:
        ready = conn.execute("""SELECT count(*) FROM pg_stat_activity
                                 WHERE application_name = ANY (%s) AND query = 'LISTEN "bc_outbox"'""",
                             (list(processes),)).fetchone()[0]
    return ready == len(processes)


def stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    codes = {owner: exit_code(process) for owner, process in processes.items()}
    failed = {owner: code for owner, code in codes.items() if code != 0}
    if failed:
        raise RuntimeError(f"worker(s) did not stop cleanly (exit codes {failed}); see {WORKER_LOG}")


def exit_code(process: subprocess.Popen[bytes]) -> int:
    try:
        return process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_SECONDS)


# -- outbox -> webhooks ----------------------------------------------------------------------------

# One event per aggregate, tenants in turn; the payload is shaped like a reservation event's.
EMIT_EVENTS = f"""
SELECT count(compute.outbox_emit({TENANT_ID_SQL.format(n='n %% %(tenants)s')}, 'bench', n::text, 'bench.event',
    jsonb_build_object('reservation_id', gen_random_uuid(), 'state', 'active', 'pool_id', gen_random_uuid(), 'shape', 'gpu',
                       'count', 1, 'start', now(), 'end', now() + interval '1 hour', 'hold_until', NULL, 'project_id', NULL)))
  FROM generate_series(1, %(events)s) AS n
"""

COUNT_DELIVERIES = """
SELECT count(*), count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'dead')
  FROM compute.webhook_deliveries
"""


def create_webhooks(dsn: str, receiver: Receiver, keys: SecretKeyring) -> None:
    """Tenant n's webhook posts to /hook/n, signed with that path's secret (sealed to the workers' key)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT worker_api.sealing_key_register(%s, %s)", (keys.key_id, keys.public_key))
        for number in range(WEBHOOK_TENANTS):
            path = f"/hook/{number}"
            conn.execute("SELECT compute.webhook_create(%s, %s, %s)",
                         (tenant_id(number), receiver.url(path), keys.seal(receiver.secrets_by_path[path]).text()))


def delivery_counts(conn: psycopg.Connection) -> tuple[int, int]:
    """How many deliveries exist and how many are delivered; a dead one is an error."""
    existing, delivered, dead = conn.execute(COUNT_DELIVERIES).fetchone()
    if dead:
        raise RuntimeError(f"{dead} deliveries are dead: see ops.webhook_dead_letters")
    return existing, delivered


def all_delivered(conn: psycopg.Connection, receiver: Receiver) -> bool:
    """Whether every delivery is recorded delivered; a signature the receiver refused is an error."""
    if receiver.tally()["bad_signatures"]:
        raise RuntimeError(f"the receiver refused signatures: {receiver.tally()}")
    return delivery_counts(conn)[1] == EVENTS


def drain_outbox(dsn: str, receiver: Receiver, audit_key: Path) -> tuple[Throughput, Throughput]:
    """Fan-out and end to end, from the commit of EVENTS events."""
    owner = "bench-webhooks"
    with (worker_processes(dsn, {owner: serve_worker_command(dsn, owner, audit_key)}),
          psycopg.connect(dsn, autocommit=True) as conn):
        conn.execute(EMIT_EVENTS, {"tenants": WEBHOOK_TENANTS, "events": EVENTS})
        started = time.monotonic()
        wait_until(lambda: delivery_counts(conn)[0] == EVENTS, DRAIN_TIMEOUT_S, f"{EVENTS} deliveries to exist")
        fanned_out = time.monotonic() - started
        wait_until(lambda: all_delivered(conn, receiver), DRAIN_TIMEOUT_S, f"{EVENTS} deliveries to be delivered")
        delivered = time.monotonic() - started
    if receiver.tally()["distinct_deliveries"] != EVENTS:
        raise RuntimeError(f"the receiver saw {receiver.tally()} for {EVENTS} events")
    return (Throughput("webhook fan-out (every delivery exists)", 1, SERVE_CONCURRENCY, EVENTS, fanned_out),
            Throughput("webhook end to end (every one delivered)", 1, SERVE_CONCURRENCY, EVENTS, delivered))


# -- work queue ------------------------------------------------------------------------------------

POKE_ITEMS = "SELECT count(compute.work_poke(%(kind)s, 'item-' || n)) FROM generate_series(1, %(items)s) AS n"
LIVE_ITEMS = "SELECT count(*) FROM compute.work WHERE kind = %s AND state IN ('pending', 'running')"


def drain_work(dsn: str, workers: int, audit_key: Path) -> Throughput:
    """WORK_ITEMS no-op items through `workers` processes, from the commit of the pokes until none is live."""
    with psycopg.connect(dsn, autocommit=True) as conn:  # the same start for every run: no items, a fresh table
        conn.execute("DELETE FROM compute.work WHERE kind = %s", (NOOP_KIND,))
        conn.execute("VACUUM ANALYZE compute.work")
    owners = [f"bench-noop-{workers}-{index}" for index in range(workers)]
    with (worker_processes(dsn, {owner: noop_worker_command(dsn, owner, audit_key) for owner in owners}),
          psycopg.connect(dsn, autocommit=True) as conn):
        conn.execute(POKE_ITEMS, {"kind": NOOP_KIND, "items": WORK_ITEMS})
        started = time.monotonic()
        wait_until(lambda: conn.execute(LIVE_ITEMS, (NOOP_KIND,)).fetchone()[0] == 0, DRAIN_TIMEOUT_S,
                   f"{WORK_ITEMS} {NOOP_KIND} items to be done")
        seconds = time.monotonic() - started
        done = conn.execute("SELECT count(*) FROM compute.work WHERE kind = %s AND state = 'done'", (NOOP_KIND,)).fetchone()[0]
    if done != WORK_ITEMS:
        raise RuntimeError(f"{done} of {WORK_ITEMS} {NOOP_KIND} items done")
    return Throughput(f"work items claimed + completed ({NOOP_KIND})", workers, WORK_CONCURRENCY, WORK_ITEMS, seconds)


# -- report ----------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    timings = report["timings_s"]
    print()
    print(f"Webhooks: {EVENTS:,} events of {WEBHOOK_TENANTS} tenants, one webhook each, to a local receiver (checks each "
          f"signature, answers 200); one `better-compute serve worker` (concurrency {SERVE_CONCURRENCY}).")
    print(f"Work queue: {WORK_ITEMS:,} '{NOOP_KIND}' items; worker processes with the serve-worker handlers plus a no-op one, "
          f"concurrency {WORK_CONCURRENCY} each.")
    print(f"Clock: from the commit of the events or items (the workers already LISTEN), polled every {POLL_SECONDS} s.")
    print()
    header = f"{'measure':<50} | {'workers':>9} | {'items':>7} | {'seconds':>7} | {'per s':>8}"
    print(header)
    print("-" * len(header))
    for row in report["throughput"]:
        workers = f"{row['workers']} x c{row['concurrency']}"
        print(f"{row['measure']:<50} | {workers:>9} | {row['items']:>7,} | {row['seconds']:>7.2f} | {row['per_second']:>8,.1f}")
    receiver = report["receiver"]
    print()
    print(f"Receiver: {receiver['requests']:,} requests, {receiver['distinct_deliveries']:,} distinct delivery ids, "
          f"{receiver['bad_signatures']} bad signatures")
    print(machine_line(report["machine"]))
    print(f"Total {timings['total']} s (phases: " + ", ".join(f"{k} {v} s" for k, v in timings.items() if k != "total")
          + f"); figures in {RESULTS.relative_to(ROOT)} (\"worker\"), worker logs in {WORKER_LOG.relative_to(ROOT)}")


# -- main ------------------------------------------------------------------------------------------


def benchmark(cluster: embedded.Cluster) -> dict[str, Any]:
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    began = time.perf_counter()
    dsn = cluster.conninfo(DBNAME)
    audit_key = cluster.base / "audit-ed25519.pem"
    with phase(timings, "migrate"):
        cluster.ensure_database(DBNAME)
        migrate.migrate(dsn)
    secrets_by_path = {f"/hook/{number}": secrets.token_hex(16) for number in range(WEBHOOK_TENANTS)}
    with phase(timings, "webhooks"), receiving(secrets_by_path) as receiver:
        create_webhooks(dsn, receiver, webhook_keys_beside(audit_key))
        throughput = list(drain_outbox(dsn, receiver, audit_key))
        received = receiver.tally()
    for workers in WORKER_COUNTS:
        with phase(timings, f"work queue, {workers} worker(s)"):
            throughput.append(drain_work(dsn, workers, audit_key))
    timings["total"] = round(time.perf_counter() - began, 2)
    return {
        "machine": machine(load_at_start),
        "throughput": [row.as_json() for row in throughput],
        "receiver": received,
        "settings": {"events": EVENTS, "webhook_tenants": WEBHOOK_TENANTS, "serve_concurrency": SERVE_CONCURRENCY,
                     "work_items": WORK_ITEMS, "worker_counts": list(WORKER_COUNTS), "work_concurrency": WORK_CONCURRENCY,
                     "poll_seconds": POLL_SECONDS,
                     "workers": "separate processes, each with its own pool, LISTENing before the work is committed",
                     "cluster": "embedded throwaway cluster, fsync=off, default settings otherwise"},
        "timings_s": timings,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == [NOOP_WORKER]:
        serve_noop_worker(*argv[1:])
        return 0
    WORKER_LOG.parent.mkdir(exist_ok=True)
    WORKER_LOG.write_text("")
    with throwaway_cluster("bc-bench-worker-") as cluster:
        report = benchmark(cluster)
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("worker", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
