"""Chaos: `better-compute serve worker` is killed with SIGKILL at random moments (at least 20 times,
sometimes with two workers running at once) while a producer keeps making events and usage; then one
worker drains the queue. Afterwards every event was delivered at least once (retries keep their
delivery id), no work item is lost, dead or stuck past its lease, and every usage window reached the
ledger exactly once.

The producer books a small pool in the past (its clock pinned per transaction), so that the usage
windows are closed hours for the workers, which follow the real clock. Four kinds of reservation:
released early, run to their end, left provisional (the workers' expiry sweep voids them) and
activated with a lease that has lapsed (the sweep ends them at hold_until: usage must wait for it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from better_compute.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from worker_support import REPO, WEBHOOK_KEYS, Receiver, Received, Reply, sealed, wait_until

CLI = [sys.executable, "-m", "better_compute.cli.main", "serve", "worker"]
READY_LINE = "kinds, concurrency"  # what `serve worker` logs once it is connected
H200_INVENTORY = Path(__file__).parent / "fixtures" / "nvidia-h200" / "inventory.json"
TENANT = uuid.UUID("00000000-0000-0000-0000-00000000c4a0")
SECRET = "chaos-webhook-secret-0123456789"
TOLERANCE_SECONDS = 300

KILLS = 22
TWO_WORKERS_RATE = 0.35  # rounds run with two workers at once (fencing)
KILL_AFTER_SECONDS = (0.3, 1.5)  # after the worker is up
LEASE_SECONDS = 2
POLL_SECONDS = 0.2
FAIL_RATE = 0.2  # the receiver answers 500
SLOW_RATE = 0.02  # it answers late (sometimes later than webhook_timeout_seconds)
SLOW_SECONDS = (0.1, 1.2)
WEBHOOK_TIMEOUT_SECONDS = 1
DRAIN_SECONDS = 60

GPUS = 4
STEP = timedelta(minutes=10)  # between the starts of two reservations: at most three overlap
LONGEST = timedelta(minutes=30)
PRODUCER_PACE_SECONDS = 0.25
LAPSED_HOLD = timedelta(seconds=60)
HOUR = timedelta(hours=1)

# Retries within the test. Every kill of a worker holding an item costs the item an attempt (a worker
# that dies on an item must not crash-loop on it forever), and no worker here lives past 1.5 s, less
# than one webhook.deliver run (up to 100 sends, some slow) may take: the default 10 attempts would
# be spent by the kills alone.
TEST_LIMITS = {
    "webhook_backoff_base_seconds": 1,
    "webhook_backoff_cap_seconds": 4,
    "webhook_timeout_seconds": WEBHOOK_TIMEOUT_SECONDS,
    "work_backoff_base_seconds": 1,
    "work_backoff_cap_seconds": 4,
    "work_attempts": 100,
}


@pytest.fixture
def pg(db: psycopg.Connection) -> psycopg.Connection:
    """The test's session, autocommit; fast retries, and usage exported every second (so that it
    races the expiry sweep)."""
    db.autocommit = True
    db.execute("UPDATE compute.work_periodic SET every = interval '1 second' WHERE kind = 'usage.export'")
    for name, value in TEST_LIMITS.items():
        db.execute("UPDATE compute.limits SET value = %s WHERE name = %s", (value, name))
    return db


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns()))
    print(f"chaos seed {seed} (set CHAOS_SEED to seed the random choices again; the timing is the machine's)")
    return random.Random(seed)


# The endpoint.

@dataclass(frozen=True)
class Answered:
    delivery_id: str
    event_id: int
    status: int
    signed: bool


@dataclass
class ChaoticEndpoint:
    """Checks signatures, records every request and answers 500 or late at random."""

    rng: random.Random
    answered: list[Answered] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Received, _earlier: list[Received]) -> Reply:
        signed = verify_signature(SECRET, request.header(TIMESTAMP_HEADER), request.body, request.header(SIGNATURE_HEADER),
                                  TOLERANCE_SECONDS)
        with self.lock:
            status = 500 if self.rng.random() < FAIL_RATE else 200
            delay = self.rng.uniform(*SLOW_SECONDS) if self.rng.random() < SLOW_RATE else 0.0
            self.answered.append(Answered(request.header(DELIVERY_HEADER), json.loads(request.body)["id"],
                                          status if signed else 400, signed))
        return Reply(status if signed else 400, delay)

    def snapshot(self) -> list[Answered]:
        with self.lock:
            return list(self.answered)


# The producer.

def pool_of_gpus(pg: psycopg.Connection, since: datetime) -> uuid.UUID:
    """One node of GPUS copies of the captured H200, offering whole GPUs, registered at `since`
    (layouts hold from registration on)."""
    pg.execute("SELECT compute.clock_pin(%s)", (since,))
    captured = json.loads(H200_INVENTORY.read_text())
    devices = [captured["devices"][0] | {"uuid": f"GPU-{uuid.uuid4()}", "index": index, "device_nodes": [f"/dev/nvidia{index}"],
                                         "pci_bus_id": f"00000000:{16 + index:x}:00.0"}
               for index in range(GPUS)]
    site_id = pg.execute("SELECT compute.site_create('chaos-site')").fetchone()[0]
    pool_id = pg.execute("SELECT compute.pool_create(%s, 'chaos-pool', 'NVIDIA H200')", (site_id,)).fetchone()[0]
    pg.execute("SELECT compute.node_register(%s, 'chaos-node', %s)",
               (pool_id, Jsonb(captured | {"hostname": "chaos-node", "devices": devices})))
    pg.execute("SELECT compute.offering_create(%s, 'gpu', 8, interval '30 days')", (pool_id,))
    pg.execute("SELECT compute.clock_unpin()")
    return pool_id


@dataclass
class Producer:
    """A thread with its own connection: one reservation per transaction, each in the past at its
    own pinned time, until stopped or out of closed hours. `held` is the booked time each
    reservation ends with (none for a voided one), worked out here and not by the database."""

    dsn: str
    pool_id: uuid.UUID
    rng: random.Random
    at: datetime
    until: datetime
    held: dict[uuid.UUID, tuple[datetime, datetime] | None] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)
    thread: threading.Thread | None = None

    def __enter__(self) -> Producer:
        self.thread = threading.Thread(target=self.run, name="chaos-producer", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        assert self.thread is not None
        self.thread.join(30)
        assert not self.thread.is_alive(), "the producer did not stop"
        assert not self.failure, f"the producer failed: {self.failure[0]!r}"

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stopping.is_set() and self.at + LONGEST <= self.until:
                    with conn.transaction():
                        self.produce(conn, self.at)
                    self.at += STEP
                    self.stopping.wait(PRODUCER_PACE_SECONDS)
        except BaseException as error:  # surfaced by __exit__
            self.failure.append(error)

    def produce(self, conn: psycopg.Connection, at: datetime) -> None:
        conn.execute("SELECT compute.clock_pin(%s, true)", (at,))
        kind = self.rng.choice(("released", "finished", "voided", "lapsed"))
        if kind == "released":
            reservation_id = self.reserve(conn, at, LONGEST)
            ended = at + timedelta(minutes=self.rng.randint(5, 25))
            conn.execute("SELECT compute.clock_pin(%s, true)", (ended,))
            conn.execute("SELECT compute.reservation_release(%s)", (reservation_id,))
            self.held[reservation_id] = (at, ended)
        elif kind == "finished":
            self.held[self.reserve(conn, at, timedelta(minutes=20))] = (at, at + timedelta(minutes=20))
        elif kind == "voided":  # left provisional: the expiry sweep voids it
            self.held[self.reserve(conn, at, LONGEST, activate=False)] = None
        else:  # its lease lapsed long ago: the expiry sweep ends it at hold_until
            self.held[self.reserve(conn, at, LONGEST, hold=LAPSED_HOLD)] = (at, at + LAPSED_HOLD)

    def reserve(self, conn: psycopg.Connection, at: datetime, length: timedelta, activate: bool = True,
                hold: timedelta | None = None) -> uuid.UUID:
        request = {"tenant_id": str(TENANT), "pool_id": str(self.pool_id), "shape": "gpu", "count": 1,
                   "start": at.isoformat(), "end": (at + length).isoformat(),
                   "hold_seconds": None if hold is None else int(hold.total_seconds())}
        reservation_id = uuid.UUID(conn.execute("SELECT compute.reserve(%s) ->> 'reservation_id'", (Jsonb(request),)).fetchone()[0])
        if activate:
            conn.execute("SELECT compute.reservation_activate(%s)", (reservation_id,))
        return reservation_id


# The workers.

@dataclass
class WorkerProcess:
    """`better-compute serve worker` in a subprocess, its output in a file."""

    owner: str
    log: Path
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, dsn: str, owner: str, directory: Path) -> WorkerProcess:
        log = directory / f"{owner}.log"
        env = os.environ | {"PYTHONPATH": str(REPO / "py")}
        with log.open("wb") as output:
            process = subprocess.Popen([*CLI, "--dsn", dsn, "--owner", owner, "--concurrency", "4",
                                        "--lease-seconds", str(LEASE_SECONDS), "--poll-seconds", str(POLL_SECONDS),
                                        "--grace-seconds", "10", "--audit-key", str(directory / "audit.pem"),
                                        "--intent-key", str(directory / "intent.key"),
                                        "--webhook-key", str(WEBHOOK_KEYS.current_path),
                                        "--webhooks-to-private-addresses"],  # the receiver listens on 127.0.0.1
                                       env=env, stdout=output, stderr=subprocess.STDOUT)
        return cls(owner, log, process)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> bool:
        self.require_alive()
        return READY_LINE in self.output()

    def require_alive(self) -> None:
        """A worker that exits by itself crashed: fail with what it said."""
        if self.process.poll() is not None:
            raise AssertionError(f"worker {self.owner} exited by itself ({self.process.returncode}):\n{self.output()[-4000:]}")

    def kill(self) -> None:
        self.require_alive()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


@dataclass
class Chaos:
    """Starts and kills workers; counts the kills, and those of a worker that held running work."""

    dsn: str
    directory: Path
    rng: random.Random
    pg: psycopg.Connection
    started: list[WorkerProcess] = field(default_factory=list)
    kills: int = 0
    kills_holding_work: int = 0
    rounds_with_two: int = 0

    def worker(self) -> WorkerProcess:
        process = WorkerProcess.start(self.dsn, f"chaos-{len(self.started)}", self.directory)
        self.started.append(process)
        return process

    def rage(self, rounds: int) -> None:
        """Each round: one or two workers up, then one of them killed 0.3-1.5 s later."""
        alive: list[WorkerProcess] = []
        for _ in range(rounds):
            wanted = 2 if self.rng.random() < TWO_WORKERS_RATE else 1
            self.rounds_with_two += wanted == 2
            while len(alive) < wanted:
                alive.append(self.worker())
            for process in alive:
                wait_until(process.ready, 30, f"worker {process.owner} up")
            time.sleep(self.rng.uniform(*KILL_AFTER_SECONDS))
            self.kill(alive.pop(self.rng.randrange(len(alive))))
        for process in alive:
            self.kill(process)

    def kill(self, process: WorkerProcess) -> None:
        holding = self.pg.execute("SELECT count(*) FROM compute.work WHERE state = 'running' AND lease_owner = %s",
                                  (process.owner,)).fetchone()[0]
        process.kill()
        self.kills += 1
        self.kills_holding_work += holding > 0

    def cleanup(self) -> None:
        for process in self.started:
            if process.process.poll() is None:
                process.process.kill()
                process.process.wait(10)


@pytest.fixture
def chaos(pg: psycopg.Connection, db_dsn: str, tmp_path: Path, rng: random.Random) -> Iterator[Chaos]:
    chaos = Chaos(db_dsn, tmp_path, rng, pg)
    try:
        yield chaos
    finally:
        chaos.cleanup()


# What must hold afterwards.

SETTLED = """
SELECT NOT EXISTS (SELECT 1 FROM compute.outbox AS o
                    WHERE o.tenant_id = %(tenant)s
                      AND NOT EXISTS (SELECT 1 FROM compute.webhook_deliveries AS d
                                       WHERE d.event_id = o.event_id AND d.state = 'delivered'))
   AND NOT EXISTS (SELECT 1 FROM compute.reservations AS r
                    WHERE r.state = 'provisional' OR (r.state = 'active' AND r.hold_until <= now()))
   AND NOT EXISTS (SELECT 1 FROM compute.reservations AS r
                     LEFT JOIN compute.usage_progress AS p ON p.reservation_id = r.reservation_id
                    WHERE r.state IN ('active', 'released', 'expired')
                      AND coalesce(p.computed_until, '-infinity') < upper(r.during))
   AND NOT EXISTS (SELECT 1 FROM compute.usage_windows AS u WHERE u.sent_at IS NULL)
"""


def settled(pg: psycopg.Connection) -> bool:
    return pg.execute(SETTLED, {"tenant": TENANT}).fetchone()[0]


def expected_windows(held: dict[uuid.UUID, tuple[datetime, datetime] | None]) -> dict[tuple[uuid.UUID, datetime], Decimal]:
    """GPU-seconds (one GPU each) per reservation per hour, split by hand."""
    windows: dict[tuple[uuid.UUID, datetime], Decimal] = {}
    for reservation_id, booked in held.items():
        if booked is None:
            continue
        start, end = booked
        hour = start.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            overlap = min(end, hour + HOUR) - max(start, hour)
            windows[(reservation_id, hour)] = Decimal(int(overlap.total_seconds()))
            hour += HOUR
    return windows


def check_deliveries(pg: psycopg.Connection, answered: list[Answered]) -> dict[str, int]:
    """Every event of the tenant: one delivery, delivered, with a 2xx answer to its delivery id."""
    rows = pg.execute("""SELECT o.event_id, d.delivery_id::text, d.state
                           FROM compute.outbox AS o
                           LEFT JOIN compute.webhook_deliveries AS d ON d.event_id = o.event_id
                          WHERE o.tenant_id = %s""", (TENANT,)).fetchall()
    delivery_of = {event_id: delivery_id for event_id, delivery_id, _ in rows}
    assert len(delivery_of) == len(rows), "an event has more than one delivery"
    assert all(state == "delivered" for _, _, state in rows), "an event was not delivered"
    assert all(request.signed for request in answered), "a request was not signed properly"
    by_event: dict[int, list[Answered]] = defaultdict(list)
    for request in answered:
        by_event[request.event_id].append(request)
    assert set(by_event) == set(delivery_of), "the receiver saw other events than the outbox holds"
    for event_id, requests in by_event.items():
        assert {request.delivery_id for request in requests} == {delivery_of[event_id]}, f"event {event_id}: delivery ids differ"
        assert any(request.status == 200 for request in requests), f"event {event_id} was never answered 200"
    return {"events": len(rows), "deliveries": len(set(delivery_of.values())), "requests": len(answered),
            "failed requests": sum(request.status != 200 for request in answered),
            "duplicates": sum(sum(request.status == 200 for request in requests) > 1 for requests in by_event.values())}


def check_usage(pg: psycopg.Connection, held: dict[uuid.UUID, tuple[datetime, datetime] | None]) -> dict[str, int]:
    """Every window is the booked time, sent, and in the ledger exactly once with its quantity."""
    windows = {(reservation_id, window_start): (gpu_seconds, ledger_key, sent_at)
               for reservation_id, window_start, gpu_seconds, ledger_key, sent_at in pg.execute(
                   "SELECT reservation_id, window_start, gpu_seconds, ledger_key, sent_at FROM compute.usage_windows").fetchall()}
    assert {key: seconds for key, (seconds, _, _) in windows.items()} == expected_windows(held)
    assert all(sent_at is not None for _, _, sent_at in windows.values()), "a window was not sent"
    ledger = dict(pg.execute("SELECT idempotency_key, quantity FROM compute.ledger_entries").fetchall())
    assert ledger == {ledger_key: seconds for seconds, ledger_key, _ in windows.values()}
    return {"usage windows": len(windows), "ledger entries": len(ledger)}


def check_reservations(pg: psycopg.Connection, held: dict[uuid.UUID, tuple[datetime, datetime] | None]) -> None:
    """The sweep voided what was left provisional and ended lapsed leases at hold_until."""
    rows = pg.execute("SELECT reservation_id, state, lower(during), upper(during) FROM compute.reservations").fetchall()
    ended = {reservation_id: None if state == "void" else (start, end) for reservation_id, state, start, end in rows}
    assert ended == held


def check_work(pg: psycopg.Connection) -> None:
    dead = pg.execute("SELECT kind, key, attempts, last_error FROM compute.work WHERE state = 'dead'").fetchall()
    assert dead == [], f"dead work items: {dead}"
    stuck = pg.execute("SELECT kind, key, lease_owner, lease_expires_at FROM compute.work"
                       " WHERE state = 'running' AND lease_expires_at < now()").fetchall()
    assert stuck == [], f"work items running past their lease: {stuck}"


def test_killed_workers_lose_nothing(pg: psycopg.Connection, chaos: Chaos, rng: random.Random) -> None:
    began = time.monotonic()
    this_hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    first = this_hour - timedelta(hours=36)
    pool_id = pool_of_gpus(pg, first - HOUR)
    endpoint = ChaoticEndpoint(random.Random(rng.getrandbits(64)))
    with Receiver(endpoint) as receiver:
        pg.execute("SELECT compute.webhook_create(%s, %s, %s)", (TENANT, receiver.url, sealed(pg, SECRET)))
        with Producer(chaos.dsn, pool_id, random.Random(rng.getrandbits(64)), first, this_hour) as producer:
            chaos.rage(KILLS)
        raged = time.monotonic()
        drainer = chaos.worker()
        wait_until(lambda: drainer.require_alive() or settled(pg), DRAIN_SECONDS, "the queue to drain")
        drained = time.monotonic()
        time.sleep(LEASE_SECONDS + POLL_SECONDS)  # leases of the killed workers' last claims have run out
        check_work(pg)
        assert drainer.terminate(timeout=15) == 0, drainer.output()[-4000:]
        answered = endpoint.snapshot()
    assert pg.execute("SELECT count(*) FROM compute.work WHERE state = 'running'").fetchone()[0] == 0
    check_reservations(pg, producer.held)
    summary = {"kills": chaos.kills, "kills holding work": chaos.kills_holding_work,
               "rounds with two workers": chaos.rounds_with_two, "reservations": len(producer.held),
               **check_deliveries(pg, answered), **check_usage(pg, producer.held),
               "chaos seconds": round(raged - began, 1), "drain seconds": round(drained - raged, 1),
               "seconds": round(time.monotonic() - began, 1)}
    print("chaos summary: " + ", ".join(f"{name} {value}" for name, value in summary.items()))
    assert chaos.kills >= 20
