"""Capacity benchmark (`make bench`; a measurement, not a test).

In one throwaway cluster: build a 1,000-node H200 fleet from the real inventory fixture, load over a
million historical bookings, keep that state as a template database, then measure
  - reservations admitted per second (compute.reserve_hold, then compute.reservation_activate, each in
    its own transaction as the admission flow does: api.prepare places and books without building the
    reservation's document, the IAM decision, then api.admit activates and answers the document) at 1, 2 and 8
    concurrent clients, each run on a fresh copy of the loaded state (so that the client counts
    compare: a run fills the pools, and placement slows as they fill), with latencies, the
    conflict rate, the rate in each quarter of the run (the fill effect) and the server CPU time per
    admission (the client backends' own CPU time, from /proc: robust on a busy machine);
  - the last copy filled to FILL_RESERVATIONS admissions, then one client again: filled vs fresh;
  - the raw insert rate into a table with the same exclusion constraint, same clients, same duration;
  - the two-step floor: one row inserted, then updated, in two transactions, into a table with the
    same partial exclusion constraint: the most any two-transaction admission can reach;
  - the same rows a reservation writes (one booking per atom asked for), straight into the real tables
    (no placement), three ways: in one transaction; then a reservation-only update in a second; then
    an update of both;
  - capacity_free and capacity_earliest latencies with the history present.
Prints a table, then issue 16's targets as MET / NOT MET with the figures, and writes every figure to
the "capacity" section of .bc/bench.json. BENCH_SECONDS, BENCH_NODES_PER_POOL, BENCH_HISTORY_PER_PAIR
and BENCH_FILL shrink it for a quick look (the targets are judged on the full size).
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from better_compute import embedded, migrate

from common import (RESULTS, ROOT, TENANT_ID_SQL, machine, machine_line, phase, tenant_id, throwaway_cluster,
                    write_section)

INVENTORY = ROOT / "tests" / "fixtures" / "nvidia-h200" / "inventory.json"
DBNAME = "bc_bench"
LOADED_DBNAME = "bc_bench_loaded"   # the template every measured run starts from

POOL_POLICIES = ("pack", "pack", "spread", "spread")
NODES_PER_POOL = int(os.environ.get("BENCH_NODES_PER_POOL", "250"))  # the BENCH_* knobs: short runs while developing
GPUS_PER_NODE = 8
MIG_GPU_INDEX, MIG_LAYOUT = 6, "mig:3g.71gb@0,3g.71gb@4"
SLOT_GPU_INDEX, SLOT_LAYOUT = 7, "timeslice:4"
SHAPES = ("gpu", "mig:3g.71gb", "slot")
OFFERING_MAX_COUNT, OFFERING_MAX_DURATION = 64, timedelta(days=30)

TENANTS = 1000
TENANTS_PER_CLIENT = 100
HISTORY_PER_ATOM_PAIR = int(os.environ.get("BENCH_HISTORY_PER_PAIR", "84"))  # x 6,000 atom pairs x 2 atoms = 1,008,000 released
HISTORY_SLOT = timedelta(hours=50)  # one booking per atom per slot: 84 slots = 175 days back
FUTURE_PER_ATOM_PAIR = 2            # active bookings per atom pair in the next 30 days,
FUTURE_SLOT = timedelta(days=15)    # one per atom per 15 days

CLIENT_COUNTS = (1, 2, 8)
RUN_SECONDS = int(os.environ.get("BENCH_SECONDS", "20"))
FILL_RESERVATIONS = int(os.environ.get("BENCH_FILL", "17000"))  # admitted after the loaded state before the "filled" run
BOOKING_HORIZON = timedelta(days=30)
SHAPE_WEIGHTS = {"gpu": 0.8, "mig:3g.71gb": 0.1, "slot": 0.1}
REQUEST_COUNTS = (1, 2)             # atoms a request asks for, drawn evenly (the same-rows floors write as many bookings)
CAPACITY_FREE_CALLS = 200
WHOLE_GPUS_PER_POOL = NODES_PER_POOL * (GPUS_PER_NODE - 2)
# capacity_earliest: (shape, count, hours); the last asks for every whole GPU of a pool, so it must search
# past the last live booking (about 30 days ahead).
EARLIEST_CASES = (("gpu", 1, 24), ("gpu", 8, 48), ("gpu", 64, 24), ("mig:3g.71gb", 2, 12), ("slot", 16, 6),
                  ("gpu", WHOLE_GPUS_PER_POOL, 24))

# Issue 16's targets (ratios in one run, 8 clients unless said).
TARGET_TO_SAME_ROWS_TWO_TX = 0.45   # admission / the same rows then a reservation-only update, two transactions
TARGET_TO_TWO_STEP = 0.25           # admission / the two-step floor
TARGET_CPU_MS_FRESH = 1.0           # server CPU ms per admission, 1 client, fresh fleet
TARGET_FILLED_TO_FRESH = 0.85       # CPU per admission fresh / filled (= rate filled / fresh where the server's CPU decides)
TARGET_LAST_TO_FIRST_QUARTER = 0.9  # admissions/s in the last quarter of the 8-client run / the first
TARGET_P99_MS = 25.0
TARGET_FALSE_CONFLICTS = 0.005      # CAPACITY_CONFLICT per attempt, while at least 20% of the pool is free
TARGET_FREE_FRACTION = 0.2
TARGET_CAPACITY_FREE_P50_MS = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CONFLICT_SQLSTATES = {"BC409": "CAPACITY_CONFLICT", "23P01": "exclusion_violation", "40P01": "deadlock"}


# -- results ---------------------------------------------------------------------------------------


@dataclass
class Latencies:
    """Milliseconds of each call; summarised as count, p50, p99, mean, max."""

    samples: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | None]:
        if not self.samples:
            return {"count": 0, "p50_ms": None, "p99_ms": None, "mean_ms": None, "max_ms": None}
        ordered = sorted(self.samples)
        return {"count": len(ordered), "p50_ms": round(percentile(ordered, 50), 3), "p99_ms": round(percentile(ordered, 99), 3),
                "mean_ms": round(statistics.fmean(ordered), 3), "max_ms": round(ordered[-1], 3)}


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    return ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1]


@dataclass
class ClientTally:
    """What one client thread saw during a run."""

    succeeded: int = 0
    conflicts: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)   # time.monotonic() of each success
    server_cpu_seconds: float = 0.0  # CPU time of the client's server process (backend) during the loop

    def success(self, started: float) -> None:
        """One operation that began at perf_counter() `started` succeeded now."""
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.finished.append(time.monotonic())
        self.succeeded += 1


@dataclass
class RunResult:
    """One run: a workload at a number of concurrent clients for a fixed duration."""

    workload: str
    clients: int
    seconds: float
    succeeded: int
    conflicts: dict[str, int]
    errors: dict[str, int]
    latency: dict[str, float | int | None]
    per_second_by_quarter: list[float]
    server_cpu_ms_per_success: float | None = None

    @property
    def per_second(self) -> float:
        return self.succeeded / self.seconds

    @property
    def attempts(self) -> int:
        return self.succeeded + sum(self.conflicts.values()) + sum(self.errors.values())

    @property
    def conflict_rate(self) -> float:
        return sum(self.conflicts.values()) / self.attempts if self.attempts else 0.0

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "per_second": round(self.per_second, 2), "attempts": self.attempts,
                "conflict_rate": round(self.conflict_rate, 4)}


def merge(workload: str, clients: int, began: float, seconds: float, tallies: list[ClientTally]) -> RunResult:
    conflicts: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    latencies = Latencies()
    for tally in tallies:
        conflicts.update(tally.conflicts)
        errors.update(tally.errors)
        latencies.samples.extend(tally.latencies)
    quarters = Counter(min(3, int((at - began) * 4 / seconds)) for tally in tallies for at in tally.finished)
    succeeded = sum(t.succeeded for t in tallies)
    cpu_ms = round(sum(t.server_cpu_seconds for t in tallies) * 1000 / succeeded, 3) if succeeded else None
    return RunResult(workload, clients, round(seconds, 3), succeeded, dict(conflicts), dict(errors),
                     latencies.summary(), [round(quarters[q] * 4 / seconds, 1) for q in range(4)], cpu_ms)


# -- the fleet -------------------------------------------------------------------------------------

REGISTER_NODES = """
SELECT count(compute.node_register(%(pool)s, x.name,
    jsonb_set(jsonb_set(%(template)s::jsonb, '{hostname}', to_jsonb(x.name)), '{devices}',
        (SELECT jsonb_agg(%(template)s::jsonb #> '{devices,0}' || jsonb_build_object(
                    'uuid', 'GPU-' || md5(x.name || '/' || i)::uuid, 'index', i,
                    'pci_bus_id', format('00000000:%%s:00.0', to_hex(16 + i)),
                    'device_nodes', jsonb_build_array('/dev/nvidia' || i),
                    'nvlink_peers', (SELECT jsonb_agg('GPU-' || md5(x.name || '/' || j)::uuid)
                                       FROM generate_series(0, %(gpus)s - 1) AS j WHERE j <> i))
                  ORDER BY i)
           FROM generate_series(0, %(gpus)s - 1) AS i))))
  FROM (SELECT format('%%s-node-%%s', %(prefix)s::text, lpad(n::text, 4, '0')) AS name
          FROM generate_series(1, %(nodes)s) AS n) AS x
"""

PARTITION_GPUS = """
SELECT count(compute.device_set_layout(d.device_id, CASE d.index WHEN %(mig_index)s THEN %(mig)s ELSE %(slot)s END))
  FROM compute.devices AS d JOIN compute.nodes AS n ON n.node_id = d.node_id
 WHERE n.pool_id = %(pool)s AND d.index IN (%(mig_index)s, %(slot_index)s)
"""


def build_pool(dsn: str, number: int, policy: str, template: dict[str, object], tenant: str | None = None,
               nodes: int = NODES_PER_POOL) -> str:
    """One pool (in the site of `tenant`, else the operator's): its nodes registered from the fixture
    inventory, two GPUs per node partitioned, offerings."""
    with psycopg.connect(dsn) as conn:
        site = conn.execute("SELECT compute.site_create('bench-site', %s)", (tenant,)).fetchone()[0]
        pool = conn.execute("SELECT compute.pool_create(%s, %s, 'NVIDIA H200', %s)",
                            (site, f"bench-{policy}-{number}", policy)).fetchone()[0]
        conn.execute(REGISTER_NODES, {"pool": pool, "template": Jsonb(template), "gpus": GPUS_PER_NODE,
                                      "prefix": f"p{number}", "nodes": nodes})
        conn.execute(PARTITION_GPUS, {"pool": pool, "mig_index": MIG_GPU_INDEX, "mig": MIG_LAYOUT,
                                      "slot_index": SLOT_GPU_INDEX, "slot": SLOT_LAYOUT})
        for shape in SHAPES:
            conn.execute("SELECT compute.offering_create(%s, %s, %s, %s)", (pool, shape, OFFERING_MAX_COUNT, OFFERING_MAX_DURATION))
    return str(pool)


def build_fleet(dsn: str) -> list[str]:
    """The site's pools, built two at a time (one per core); returns pool ids in POOL_POLICIES order."""
    template = json.loads(INVENTORY.read_text())
    with psycopg.connect(dsn, autocommit=True) as conn:  # the site first, so that parallel builds don't race for it
        conn.execute("SELECT compute.site_create('bench-site')")
    pools: list[str] = [""] * len(POOL_POLICIES)

    def build(index: int) -> None:
        pools[index] = build_pool(dsn, index + 1, POOL_POLICIES[index], template)

    run_in_threads([lambda i=i: build(i) for i in range(len(POOL_POLICIES))], parallel=2)
    return pools


def run_in_threads(jobs: list[Callable[[], None]], parallel: int) -> None:
    """Run jobs, `parallel` at a time; re-raise the first failure."""
    failures: list[BaseException] = []
    for start in range(0, len(jobs), parallel):
        threads = [threading.Thread(target=guarded(job, failures)) for job in jobs[start:start + parallel]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]


def guarded(job: Callable[[], None], failures: list[BaseException]) -> Callable[[], None]:
    def run() -> None:
        try:
            job()
        except BaseException as failure:  # noqa: BLE001 - handed to the main thread
            failures.append(failure)
    return run


def fleet_counts(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute("""
        SELECT (SELECT count(*) FROM compute.pools), (SELECT count(*) FROM compute.nodes), (SELECT count(*) FROM compute.devices),
               (SELECT count(*) FROM compute.atoms WHERE upper_inf(valid)),
               (SELECT count(*) FROM compute.devices WHERE layout LIKE 'mig:%'),
               (SELECT count(*) FROM compute.devices WHERE layout LIKE 'timeslice:%')""").fetchone()
    return dict(zip(("pools", "nodes", "gpus", "atoms", "mig_gpus", "timeslice_gpus"), row, strict=True))


# -- tenants, quotas, history ----------------------------------------------------------------------

SET_QUOTAS = f"""
SELECT count(compute.quota_set({TENANT_ID_SQL.format(n='t')}, NULL, p.pool_id, 1000000, 1000000000))
  FROM generate_series(0, %(tenants)s - 1) AS t CROSS JOIN compute.pools AS p
"""

# Atoms of one shape on one node of a pool, two by two: a loaded reservation books a pair.
ATOM_PAIRS = """
CREATE TEMP TABLE atom_pairs AS
SELECT a.site_id, a.pool_id, a.shape, array_agg(a.atom_id ORDER BY a.k) AS atom_ids
  FROM (SELECT a.*, row_number() OVER (PARTITION BY a.node_id, a.shape ORDER BY a.device_index, a.slices, a.slot) - 1 AS k
          FROM compute.atoms AS a WHERE upper_inf(a.valid) AND a.pool_id = %(pool)s) AS a
 GROUP BY a.node_id, a.shape, a.k / 2, a.site_id, a.pool_id
"""

# Per atom pair, `per_pair` reservations in consecutive slots from `origin`, each lasting 1-48 h at a
# random place inside its slot (so one atom's windows never overlap). MATERIALIZED: every row draws
# its own length and place, once.
PLAN_RESERVATIONS = f"""
CREATE TEMP TABLE planned AS
WITH drawn AS MATERIALIZED (
    SELECT p.*, %(origin)s::timestamptz + k * %(slot)s::interval AS slot_start,
           (1 + floor(random() * 48)) * interval '1 hour' AS length, random() AS place
      FROM atom_pairs AS p CROSS JOIN generate_series(0, %(per_pair)s - 1) AS k
), placed AS (
    SELECT d.*, d.slot_start + d.place * (%(slot)s::interval - d.length) AS start_at FROM drawn AS d
)
SELECT gen_random_uuid() AS reservation_id, {TENANT_ID_SQL.format(n='floor(random() * %(tenants)s)::integer')} AS tenant_id,
       x.site_id, x.pool_id, x.shape, x.atom_ids, tstzrange(x.start_at, x.start_at + x.length) AS during
  FROM placed AS x
"""

INSERT_RESERVATIONS = """
INSERT INTO compute.reservations (reservation_id, tenant_id, site_id, pool_id, shape, count, during, state, request_hash,
                                  created_at, activated_at, ended_at, end_reason)
SELECT reservation_id, tenant_id, site_id, pool_id, shape, 2, during, %(state)s, 'bench',
       least(lower(during), now()) - interval '1 hour', least(lower(during), now()),
       CASE WHEN %(state)s = 'released' THEN upper(during) END, CASE WHEN %(state)s = 'released' THEN 'released' END
  FROM planned
"""

INSERT_BOOKINGS = """
INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares,
                              gpu_fraction, during, state)
SELECT p.reservation_id, p.tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id, a.slices, a.shares,
       a.gpu_fraction, p.during, CASE WHEN %(state)s = 'active' THEN 'held' ELSE %(state)s END
  FROM planned AS p CROSS JOIN LATERAL unnest(p.atom_ids) AS x(atom_id) JOIN compute.atoms AS a ON a.atom_id = x.atom_id
"""


def set_quotas(dsn: str) -> None:
    """Every bench tenant gets a generous quota in every pool, so that quota_check does its counting."""
    with psycopg.connect(dsn) as conn:
        conn.execute(SET_QUOTAS, {"tenants": TENANTS})


def load_pool_bookings(dsn: str, pool: str, now: datetime) -> Counter[str]:
    """One pool's released history over the last 175 days and active bookings in the next 30 days."""
    loads = {
        "released": {"per_pair": HISTORY_PER_ATOM_PAIR, "origin": now - HISTORY_PER_ATOM_PAIR * HISTORY_SLOT - timedelta(days=1),
                     "slot": HISTORY_SLOT},
        "active": {"per_pair": FUTURE_PER_ATOM_PAIR, "origin": now + timedelta(hours=1), "slot": FUTURE_SLOT},
    }
    counts: Counter[str] = Counter()
    with psycopg.connect(dsn) as conn:
        conn.execute(ATOM_PAIRS, {"pool": pool})
        for state, plan in loads.items():
            conn.execute("DROP TABLE IF EXISTS planned")
            conn.execute(PLAN_RESERVATIONS, {"tenants": TENANTS, **plan})
            conn.execute(INSERT_RESERVATIONS, {"state": state})
            counts[f"{state}_bookings"] += conn.execute(INSERT_BOOKINGS, {"state": state}).rowcount
    return counts


def set_outbox_triggers(dsn: str, action: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE compute.reservations {action} TRIGGER reservations_outbox")


def load_bookings(dsn: str, pools: list[str]) -> dict[str, int]:
    """Bookings loaded directly (not through reserve), two pools at a time (one per core); then VACUUM ANALYZE."""
    now = datetime.now(timezone.utc)
    per_pool: list[Counter[str]] = []
    # History is loaded as a restore would load it: its rows are not changes, so the outbox
    # triggers are off meanwhile (every other trigger, constraint and foreign key stays on).
    set_outbox_triggers(dsn, "DISABLE")
    try:
        run_in_threads([lambda pool=pool: per_pool.append(load_pool_bookings(dsn, pool, now)) for pool in pools], parallel=2)
    finally:
        set_outbox_triggers(dsn, "ENABLE")
    counts: Counter[str] = sum(per_pool, Counter())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        counts["reservations"] = conn.execute("SELECT count(*) FROM compute.reservations").fetchone()[0]
        counts["bookings"] = conn.execute("SELECT count(*) FROM compute.bookings").fetchone()[0]
    return dict(counts)


# -- admission: reserve + activate -----------------------------------------------------------------


@dataclass(frozen=True)
class RequestMaker:
    """Random reservation requests of one client: its own tenants, random pools, shapes and windows."""

    pools: list[str]
    first_tenant: int
    rng: random.Random

    def request(self) -> dict[str, object]:
        start = datetime.now(timezone.utc) + timedelta(seconds=self.rng.uniform(60, BOOKING_HORIZON.total_seconds()))
        start = start.replace(second=0, microsecond=0)
        return {"tenant_id": tenant_id(self.first_tenant + self.rng.randrange(TENANTS_PER_CLIENT)),
                "pool_id": self.rng.choice(self.pools),
                "shape": self.rng.choices(list(SHAPE_WEIGHTS), weights=list(SHAPE_WEIGHTS.values()))[0],
                "count": self.rng.choice(REQUEST_COUNTS),
                "start": start.isoformat(), "end": (start + timedelta(hours=self.rng.randint(1, 48))).isoformat()}


def classify(error: psycopg.Error, tally: ClientTally) -> None:
    """A conflict (by its HINT's first words: all busy, concurrent holders, ...) or another error."""
    if error.sqlstate in CONFLICT_SQLSTATES:
        hint = (error.diag.message_hint or "").split(":")[0].split(";")[0][:60]
        tally.conflicts[f"{CONFLICT_SQLSTATES[error.sqlstate]}: {hint}"] += 1
    else:
        tally.errors[f"{error.sqlstate}: {(error.diag.message_primary or str(error))[:80]}"] += 1


Drawn = TypeVar("Drawn")


def client_loop(dsn: str, stop_at: float, tally: ClientTally, draw: Callable[[], Drawn],
                attempt: Callable[[psycopg.Connection, Drawn], object]) -> None:
    """One client on its own autocommit connection until stop_at: draw the arguments (not timed), then
    time the attempt; a database error is a conflict or an error of the tally. The CPU time its server
    process spent meanwhile goes to the tally (the server runs on this machine)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        backend = conn.info.backend_pid
        cpu_at_start = backend_cpu_seconds(backend)
        while time.monotonic() < stop_at:
            drawn = draw()
            started = time.perf_counter()
            try:
                attempt(conn, drawn)
            except psycopg.Error as error:
                classify(error, tally)
                continue
            tally.success(started)
        tally.server_cpu_seconds += backend_cpu_seconds(backend) - cpu_at_start


def backend_cpu_seconds(pid: int) -> float:
    """User and system CPU time of a server process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def admission_client(dsn: str, maker: RequestMaker, stop_at: float, tally: ClientTally) -> None:
    """Place and book (reserve_hold, as api.prepare does), then activate, each in its own transaction
    (autocommit), until stop_at."""
    def admit(conn: psycopg.Connection, request: dict[str, object]) -> None:
        reservation_id = conn.execute("SELECT compute.reserve_hold(%s)", (Jsonb(request),)).fetchone()[0]
        conn.execute("SELECT compute.reservation_activate(%s)", (reservation_id,))
    client_loop(dsn, stop_at, tally, maker.request, admit)


# -- raw inserts under the same exclusion constraint -----------------------------------------------

CREATE_RAW = """
CREATE TABLE bench_raw (site_id uuid, device_id uuid, slices int4range, shares int4range, during tstzrange,
    EXCLUDE USING gist (site_id WITH =, device_id WITH =, slices WITH &&, shares WITH &&, during WITH &&))
"""
INSERT_RAW = "INSERT INTO bench_raw VALUES (%s, %s, int4range(0, 8), int4range(0, NULL), tstzrange(%s, %s))"


def fresh_device_rows(rng: random.Random) -> Callable[[], tuple[uuid.UUID, uuid.UUID, datetime, datetime]]:
    """Draws (site, a fresh device id, start, end) for the baselines: one site per client, a new device
    each time (so never a conflict), a window of 1-48 h within the booking horizon."""
    site = uuid.UUID(int=rng.getrandbits(128), version=4)

    def draw() -> tuple[uuid.UUID, uuid.UUID, datetime, datetime]:
        start = datetime.now(timezone.utc) + timedelta(seconds=rng.uniform(60, BOOKING_HORIZON.total_seconds()))
        return site, uuid.UUID(int=rng.getrandbits(128), version=4), start, start + timedelta(hours=rng.randint(1, 48))
    return draw


def raw_client(dsn: str, rng: random.Random, stop_at: float, tally: ClientTally) -> None:
    """One row per transaction, never conflicting (a fresh device id each), until stop_at."""
    client_loop(dsn, stop_at, tally, fresh_device_rows(rng), lambda conn, row: conn.execute(INSERT_RAW, row))


# -- the two-step floor: insert, then update, two transactions --------------------------------------

CREATE_TWO_STEP = """
CREATE TABLE bench_two_step (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, site_id uuid, device_id uuid,
    slices int4range, shares int4range, during tstzrange, state text,
    EXCLUDE USING gist (site_id WITH =, device_id WITH =, slices WITH &&, shares WITH &&, during WITH &&)
        WHERE (state IN ('provisional', 'active')))
"""
INSERT_TWO_STEP = """
INSERT INTO bench_two_step (site_id, device_id, slices, shares, during, state)
VALUES (%s, %s, int4range(0, 8), int4range(0, NULL), tstzrange(%s, %s), 'provisional') RETURNING id
"""
ACTIVATE_TWO_STEP = "UPDATE bench_two_step SET state = 'active' WHERE id = %s"


def two_step_client(dsn: str, rng: random.Random, stop_at: float, tally: ClientTally) -> None:
    """What admission does at the least: a row inserted (reserve), then updated (activate), each in its own
    transaction, under the same partial exclusion constraint; never conflicting (a fresh device id each)."""
    def insert_then_activate(conn: psycopg.Connection, row: tuple[uuid.UUID, uuid.UUID, datetime, datetime]) -> None:
        row_id = conn.execute(INSERT_TWO_STEP, row).fetchone()[0]
        conn.execute(ACTIVATE_TWO_STEP, (row_id,))
    client_loop(dsn, stop_at, tally, fresh_device_rows(rng), insert_then_activate)


def measure(workload: str, clients: int, client: Callable[[int, float, ClientTally], None]) -> RunResult:
    """`clients` threads, each with its own connection, for RUN_SECONDS."""
    tallies = [ClientTally() for _ in range(clients)]
    started = time.monotonic()
    stop_at = started + RUN_SECONDS
    run_in_threads([lambda i=i: client(i, stop_at, tallies[i]) for i in range(clients)], parallel=clients)
    result = merge(workload, clients, started, time.monotonic() - started, tallies)
    print(f"   {workload:<10} {clients} client(s): {result.per_second:8.1f}/s, {sum(result.conflicts.values())} conflicts, "
          f"{sum(result.errors.values())} errors, p50 {result.latency['p50_ms']} ms", flush=True)
    return result


# -- the loaded state, kept as a template ------------------------------------------------------------


def keep_loaded_state(cluster: embedded.Cluster) -> None:
    """The loaded fleet and history become the template LOADED_DBNAME (a file copy, a second or two;
    a template must have no session: every connection of the bench and of migrate() is closed)."""
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {LOADED_DBNAME} TEMPLATE {DBNAME}")


def fresh_copy(cluster: embedded.Cluster) -> str:
    """DBNAME again as it was loaded (the previous run's reservations gone); returns its dsn."""
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {DBNAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DBNAME} TEMPLATE {LOADED_DBNAME}")
    return cluster.conninfo(DBNAME)


# -- capacity queries ------------------------------------------------------------------------------


def capacity_free_latencies(dsn: str, pools: list[str], rng: random.Random) -> tuple[Latencies, int]:
    """capacity_free on random pools, shapes and windows; all rows fetched. Returns latencies and rows seen."""
    latencies, rows = Latencies(), 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(CAPACITY_FREE_CALLS):
            start = datetime.now(timezone.utc) + timedelta(seconds=rng.uniform(0, BOOKING_HORIZON.total_seconds()))
            args = (rng.choice(pools), rng.choice(SHAPES), start, start + timedelta(hours=rng.randint(1, 48)))
            started = time.perf_counter()
            rows += len(conn.execute("SELECT * FROM compute.capacity_free(%s, %s, %s, %s)", args).fetchall())
            latencies.samples.append((time.perf_counter() - started) * 1000)
    return latencies, rows


def capacity_earliest_latencies(dsn: str, pools: list[str], rng: random.Random) -> tuple[Latencies, list[dict[str, object]]]:
    """capacity_earliest for each of EARLIEST_CASES in a random pool: latencies and answers."""
    latencies, answers = Latencies(), []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for shape, count, hours in EARLIEST_CASES:
            started = time.perf_counter()
            start_at, _, reason = conn.execute("SELECT * FROM compute.capacity_earliest(%s, %s, %s, %s)",
                                               (rng.choice(pools), shape, count, timedelta(hours=hours))).fetchone()
            latencies.samples.append((time.perf_counter() - started) * 1000)
            answers.append({"shape": shape, "count": count, "hours": hours, "ms": round(latencies.samples[-1], 1),
                            "start_at": start_at.isoformat() if start_at else None, "reason": reason})
    return latencies, answers


# -- report ----------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    """The figures as a table, then the targets."""
    fleet, loaded, timings = report["fleet"], report["bookings_loaded"], report["timings_s"]
    print()
    print(f"Fleet: {fleet['pools']} pools ({', '.join(POOL_POLICIES)}) x {NODES_PER_POOL} nodes x {GPUS_PER_NODE} H200 = "
          f"{fleet['gpus']} GPUs; per node GPU {MIG_GPU_INDEX} {MIG_LAYOUT}, GPU {SLOT_GPU_INDEX} {SLOT_LAYOUT}; "
          f"{fleet['atoms']} atoms; built in {timings['build fleet']} s")
    print(f"Bookings: {loaded['released_bookings']:,} released (history), {loaded['active_bookings']:,} active (next 30 days), "
          f"{loaded['bookings']:,} in all; quotas and bookings loaded in {timings['load bookings']} s")
    print(f"Admission = SELECT compute.reserve_hold(...), then SELECT compute.reservation_activate(...): two transactions, "
          f"each client count on a fresh copy of the loaded state. Raw = one INSERT per transaction into bench_raw. "
          f"Two-step = one INSERT, then one UPDATE of that row, two transactions, into bench_two_step. {RUN_SECONDS} s per run. "
          f"Server CPU = the client backends' CPU time (/proc) per success.")
    print()
    runs = list(zip(report["admission"], report["raw_insert"], report["two_step"], strict=True))
    print_table(("clients", "reserv/s", "reserv/s by quarter of the run", "server CPU ms/adm", "raw ins/s", "2-step/s",
                 "adm/raw", "adm/2-step"),
                [(adm["clients"], f"{adm['per_second']:.1f}", " / ".join(f"{rate:.0f}" for rate in adm["per_second_by_quarter"]),
                  adm["server_cpu_ms_per_success"], f"{ins['per_second']:.1f}", f"{two['per_second']:.1f}",
                  f"{adm['per_second'] / ins['per_second']:.3f}", f"{adm['per_second'] / two['per_second']:.3f}")
                 for adm, ins, two in runs])
    filled = report["admission_filled"]
    print(f"Filled: after {filled['admitted_before']:,} admissions since the loaded state ({filled['free_fraction_of_whole_gpu_time']:.0%} "
          f"of whole-GPU time in the next 30 days still free), 1 client: {filled['per_second']:.1f}/s, "
          f"{filled['server_cpu_ms_per_success']} ms server CPU per admission, p50 {filled['latency']['p50_ms']} ms")
    print()
    print_table(("clients", "conflicts", "errors", "res p50 ms", "res p99 ms", "raw p50 ms", "raw p99 ms", "2-step p50", "2-step p99"),
                [(adm["clients"], f"{adm['conflict_rate']:.1%}", sum(adm["errors"].values()), adm["latency"]["p50_ms"],
                  adm["latency"]["p99_ms"], ins["latency"]["p50_ms"], ins["latency"]["p99_ms"], two["latency"]["p50_ms"],
                  two["latency"]["p99_ms"])
                 for adm, ins, two in runs])
    for adm in report["admission"]:
        for outcome, count in sorted((adm["conflicts"] | adm["errors"]).items()):
            print(f"  {adm['clients']} client(s): {count} x {outcome}")
    print("Same rows (a reservation and its bookings, one per atom of a request, written straight into the real tables, no placement), "
          f"{max(CLIENT_COUNTS)} clients:")
    for same in report["same_rows"]:
        print(f"  {same['workload']:<38} {same['per_second']:8.1f}/s, p50 {same['latency']['p50_ms']} ms, "
              f"{same['server_cpu_ms_per_success']} ms server CPU each; admission / this: "
              f"{report['ratio_admission_to_same_rows_at_8'][same['workload']]:.3f}")
    free, earliest = report["capacity_free"], report["capacity_earliest"]
    print()
    print(f"capacity_free     {free['count']} calls, all rows fetched, {report['live_bookings_at_capacity_queries']:,} live "
          f"bookings: p50 {free['p50_ms']} ms, p99 {free['p99_ms']} ms, max {free['max_ms']} ms")
    print(f"capacity_earliest {earliest['count']} calls: p50 {earliest['p50_ms']} ms, p99 {earliest['p99_ms']} ms, "
          f"max {earliest['max_ms']} ms")
    for answer in earliest["answers"]:
        print(f"  {answer['count']:>5} x {answer['shape']:<12} for {answer['hours']:>2} h: {answer['ms']:>9.1f} ms -> "
              f"{answer['start_at'] or answer['reason']}")
    print()
    for target in report["targets"]:
        print(f"Target {target['name']}: measured {target['measured']} (needs {target['needs']}) -> "
              f"{'MET' if target['met'] else 'NOT MET'}")
    print(machine_line(report["machine"]))
    print(f"Total {timings['total']} s (phases: " + ", ".join(f"{k} {v} s" for k, v in timings.items() if k != "total")
          + f"); figures in {RESULTS.relative_to(ROOT)}")


def print_table(columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
    """Right-aligned columns, each as wide as its heading (at least 6), under a rule."""
    widths = [max(len(column), 6) for column in columns]
    header = " | ".join(f"{column:>{width}}" for column, width in zip(columns, widths, strict=True))
    print(header)
    print("-" * len(header))
    for row in rows:
        print(" | ".join(f"{cell!s:>{width}}" for cell, width in zip(row, widths, strict=True)))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def target(name: str, measured: float | None, needs: str, met: Callable[[float], bool], shown: str) -> dict[str, object]:
    """One target: MET when measured and `met`; `shown` formats the figures."""
    return {"name": name, "measured": shown, "needs": needs, "met": measured is not None and met(measured)}


def targets(admission: Admission, two_step: list[RunResult], same_rows: list[RunResult], free: dict[str, Any]) -> list[dict[str, object]]:
    """Issue 16's targets, from this run's figures."""
    top = max(CLIENT_COUNTS)
    adm = next(r for r in admission.fresh if r.clients == top)
    one = next(r for r in admission.fresh if r.clients == 1)
    floor_step = next(r for r in two_step if r.clients == top)
    floor_rows = {r.workload: r for r in same_rows}[SAME_ROWS_FLOORS[1].workload]
    to_rows, to_step = ratio(adm.per_second, floor_rows.per_second), ratio(adm.per_second, floor_step.per_second)
    fresh_cpu, filled_cpu = one.server_cpu_ms_per_success, admission.filled.server_cpu_ms_per_success
    filled_to_fresh = ratio(fresh_cpu, filled_cpu)
    quarters = adm.per_second_by_quarter
    last_to_first = ratio(quarters[-1], quarters[0])
    p99 = adm.latency["p99_ms"]
    capacity_conflicts = sum(n for k, n in adm.conflicts.items() if k.startswith("CAPACITY_CONFLICT"))
    false_rate = capacity_conflicts / adm.attempts if adm.attempts else None
    free_ok = admission.free_fraction_when_filled >= TARGET_FREE_FRACTION
    return [
        target(f"admission >= {TARGET_TO_SAME_ROWS_TWO_TX} x the same rows then a reservation-only update (2 tx), {top} clients",
               to_rows, f">= {TARGET_TO_SAME_ROWS_TWO_TX}", lambda v: v >= TARGET_TO_SAME_ROWS_TWO_TX,
               f"{adm.per_second:.0f}/s / {floor_rows.per_second:.0f}/s = {to_rows:.3f}" if to_rows is not None else "n/a"),
        target(f"admission >= {TARGET_TO_TWO_STEP} x the two-step floor, {top} clients",
               to_step, f">= {TARGET_TO_TWO_STEP}", lambda v: v >= TARGET_TO_TWO_STEP,
               f"{adm.per_second:.0f}/s / {floor_step.per_second:.0f}/s = {to_step:.3f} (its rows alone, {floor_rows.workload}: "
               f"{floor_rows.per_second:.0f}/s = {ratio(floor_rows.per_second, floor_step.per_second):.3f} of the two-step floor)"
               if to_step is not None else "n/a"),
        target("server CPU per admission, 1 client, fresh fleet", fresh_cpu, f"<= {TARGET_CPU_MS_FRESH} ms",
               lambda v: v <= TARGET_CPU_MS_FRESH,
               f"{fresh_cpu} ms (its rows alone, no placement, {floor_rows.workload}, {top} clients: "
               f"{floor_rows.server_cpu_ms_per_success} ms)"),
        target(f"filled / fresh (server CPU per admission at 1 client, fresh / after {admission.admitted_before_filled:,} "
               f"admissions)", filled_to_fresh, f">= {TARGET_FILLED_TO_FRESH}", lambda v: v >= TARGET_FILLED_TO_FRESH,
               f"{fresh_cpu} ms / {filled_cpu} ms = {filled_to_fresh:.2f} (rate {admission.filled.per_second:.0f}/s filled vs "
               f"{one.per_second:.0f}/s fresh)" if filled_to_fresh is not None else "n/a"),
        target(f"last quarter / first quarter of the {top}-client run", last_to_first, f">= {TARGET_LAST_TO_FIRST_QUARTER}",
               lambda v: v >= TARGET_LAST_TO_FIRST_QUARTER,
               f"{quarters[-1]:.0f}/s / {quarters[0]:.0f}/s = {last_to_first:.2f}" if last_to_first is not None else "n/a"),
        target(f"admission p99 at {top} clients", p99, f"< {TARGET_P99_MS} ms", lambda v: v < TARGET_P99_MS,
               f"{p99} ms (its rows alone, {floor_rows.workload}: p99 {floor_rows.latency['p99_ms']} ms)"),
        target(f"false CAPACITY_CONFLICT at {top} clients while >= {TARGET_FREE_FRACTION:.0%} of the pool is free",
               false_rate if free_ok else None, f"< {TARGET_FALSE_CONFLICTS:.1%}", lambda v: v < TARGET_FALSE_CONFLICTS,
               f"{capacity_conflicts} of {adm.attempts} attempts = {false_rate or 0:.2%} (every one false: "
               f"{admission.free_fraction_when_filled:.0%} of whole-GPU time free even when filled)"),
        target("capacity_free p50", free["p50_ms"], f"< {TARGET_CAPACITY_FREE_P50_MS} ms",
               lambda v: v < TARGET_CAPACITY_FREE_P50_MS, f"{free['p50_ms']} ms"),
    ]


# -- main ------------------------------------------------------------------------------------------


@dataclass
class Admission:
    """The admission runs: one per client count on a fresh copy (`fresh`), then the last copy filled
    to FILL_RESERVATIONS admissions and measured again at one client (`filled`)."""

    fresh: list[RunResult]
    filled: RunResult
    admitted_before_filled: int
    free_fraction_when_filled: float


def admission_run(dsn: str, pools: list[str], rng: random.Random, clients: int, workload: str = "admission") -> RunResult:
    """`clients` clients admitting for RUN_SECONDS; client i books for its own tenants i*100 .. i*100+99."""
    makers = [RequestMaker(pools, i * TENANTS_PER_CLIENT, random.Random(rng.random())) for i in range(clients)]
    return measure(workload, clients, lambda i, stop, tally: admission_client(dsn, makers[i], stop, tally))


def admission_runs(cluster: embedded.Cluster, pools: list[str], rng: random.Random) -> Admission:
    """Admission at each client count, each on a fresh copy of the loaded state; then the last copy is
    filled and measured at one client again. That database stays (the capacity queries read it)."""
    fresh = []
    for clients in CLIENT_COUNTS:
        dsn = fresh_copy(cluster)
        fresh.append(admission_run(dsn, pools, rng, clients))
    admitted = fresh[-1].succeeded
    while admitted < FILL_RESERVATIONS:
        filling = admission_run(dsn, pools, rng, max(CLIENT_COUNTS), "fill")
        if filling.succeeded == 0:
            break
        admitted += filling.succeeded
    free = free_fraction(dsn)
    return Admission(fresh, admission_run(dsn, pools, rng, 1, "admission, filled"), admitted, free)


FREE_FRACTION = """
WITH horizon AS (SELECT tstzrange(now(), now() + %(horizon)s) AS w)
SELECT 1 - coalesce(sum(extract(epoch FROM upper(b.during * h.w) - lower(b.during * h.w))), 0)
           / (SELECT count(*) FROM compute.atoms WHERE shape = 'gpu' AND upper_inf(valid))
           / extract(epoch FROM %(horizon)s)
  FROM horizon AS h JOIN compute.bookings AS b ON b.during && h.w AND b.state = 'held'
  JOIN compute.atoms AS a ON a.atom_id = b.atom_id AND a.shape = 'gpu'
"""


def free_fraction(dsn: str) -> float:
    """The share of whole-GPU time free in the booking horizon (all pools)."""
    with psycopg.connect(dsn) as conn:
        return float(conn.execute(FREE_FRACTION, {"horizon": BOOKING_HORIZON}).fetchone()[0])


# The same rows a reservation writes (its reservation, one booking per atom: as many atoms as admission's
# requests ask for, REQUEST_COUNTS, on one node, as placement puts them), into the real tables with all
# their constraints, indexes and triggers, but without placement, quota or idempotency: what the
# admission flow costs on top of its own writes. Never a conflict (a failed insert would cost CPU and
# count for nothing, lowering the floor): each client writes on its own nodes' whole GPUs, in slots of
# a year after every loaded booking, one year per floor, at random places as admission's windows are.
# The floors: the rows in their final state in one transaction; the rows, then the reservation's
# activation in a second transaction (a booking written once, as issue 16 asks); the rows, then both
# activated (what admission wrote before issue 16). Each transaction is one statement, one round
# trip, as admission's are.
INSERT_SAME_ROWS = """
WITH reservation AS (
    INSERT INTO compute.reservations (reservation_id, tenant_id, site_id, pool_id, shape, count, during, state, request_hash,
                                      created_at, activated_at, expires_at)
    SELECT gen_random_uuid(), %(tenant)s, a.site_id, a.pool_id, a.shape, cardinality(%(atoms)s::uuid[]), tstzrange(%(start)s, %(end)s),
           %(reservation_state)s::text, 'raw', now(), CASE WHEN %(reservation_state)s::text = 'active' THEN now() END,
           CASE WHEN %(reservation_state)s::text = 'provisional' THEN now() + interval '5 minutes' END
      FROM compute.atoms AS a WHERE a.atom_id = (%(atoms)s::uuid[])[1]
    RETURNING *)
INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares,
                              gpu_fraction, during, state)
SELECT r.reservation_id, r.tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id, a.slices, a.shares,
       a.gpu_fraction, r.during, %(booking_state)s
  FROM reservation AS r JOIN compute.atoms AS a ON a.atom_id = ANY (%(atoms)s::uuid[])
RETURNING reservation_id
"""
ACTIVATE_RESERVATION = ("UPDATE compute.reservations SET state = 'active', expires_at = NULL, activated_at = now() "
                        "WHERE reservation_id = %(id)s")
# Before issue 16 activation also rewrote each booking row; a booking is now written once as held,
# so this floor rewrites it in place (a new row version, its triggers fired) to price that write.
ACTIVATE_BOTH = ("WITH bookings AS (UPDATE compute.bookings SET state = 'held' WHERE reservation_id = %(id)s) "
                 + ACTIVATE_RESERVATION)


@dataclass(frozen=True)
class SameRows:
    """One floor: the states the rows are inserted in, then the update of a second transaction (if any)."""

    workload: str
    reservation_state: str
    booking_state: str
    then: str | None


SAME_ROWS_FLOORS = (
    SameRows("same rows, 1 tx", "active", "held", None),
    SameRows("same rows + reservation update, 2 tx", "provisional", "held", ACTIVATE_RESERVATION),
    SameRows("same rows + both updated, 2 tx", "provisional", "held", ACTIVATE_BOTH),
)
SAME_ROWS_SLOT = timedelta(hours=49)    # a window (1-48 h) lies in one slot of its GPU: two never meet
SAME_ROWS_SLOTS = 178                    # slots in a year: windows land anywhere in it, as admission's do in its horizon
SAME_ROWS_YEAR = timedelta(days=366)


def same_rows_client(dsn: str, floor: SameRows, groups: list[list[str]], origin: datetime, rng: random.Random,
                     stop_at: float, tally: ClientTally) -> None:
    """One reservation and its bookings on the first atoms of one of the client's own groups of whole
    GPUs (as many as a request asks for), in a slot of the year from `origin` that this client has not
    used on that group (drawn at random, so the rows spread over the indexes as admission's do), then
    the floor's update, until stop_at."""
    used: set[tuple[int, int]] = set()

    def draw() -> dict[str, object]:
        while (slot := (rng.randrange(len(groups)), rng.randrange(SAME_ROWS_SLOTS))) in used:
            pass
        used.add(slot)
        hours = rng.randint(1, 48)
        start = origin + slot[1] * SAME_ROWS_SLOT + timedelta(hours=rng.randint(0, 48 - hours))
        return {"tenant": tenant_id(rng.randrange(TENANTS)), "atoms": groups[slot[0]][:rng.choice(REQUEST_COUNTS)],
                "start": start, "end": start + timedelta(hours=hours), "reservation_state": floor.reservation_state,
                "booking_state": floor.booking_state}

    def write(conn: psycopg.Connection, params: dict[str, object]) -> None:
        reservation_id = conn.execute(INSERT_SAME_ROWS, params).fetchone()[0]
        if floor.then:
            conn.execute(floor.then, {"id": reservation_id})
    client_loop(dsn, stop_at, tally, draw, write)


def whole_gpu_groups(dsn: str) -> list[list[list[str]]]:
    """Each node's whole GPUs in groups of max(REQUEST_COUNTS) (a node's last, smaller group left
    out); the groups of a node, and the nodes, dealt out in turn to the clients of the most clients."""
    size, clients = max(REQUEST_COUNTS), max(CLIENT_COUNTS)
    by_node: dict[str, list[str]] = {}
    with psycopg.connect(dsn) as conn:
        for node, atom in conn.execute("SELECT node_id, atom_id FROM compute.atoms WHERE shape = 'gpu' AND upper_inf(valid) "
                                       "ORDER BY node_id, device_index"):
            by_node.setdefault(str(node), []).append(str(atom))
    nodes = list(by_node.values())
    return [[atoms[k:k + size] for atoms in nodes[i::clients] for k in range(0, len(atoms) - size + 1, size)]
            for i in range(clients)]


def same_rows_runs(dsn: str, rng: random.Random) -> list[RunResult]:
    """Each floor at the most clients, one after another on the same copy: client i writes on every
    `clients`-th node's whole GPUs, each floor in its own year after every loaded booking, so no two
    rows meet."""
    clients = max(CLIENT_COUNTS)
    groups = whole_gpu_groups(dsn)
    with psycopg.connect(dsn) as conn:
        after_all = conn.execute("SELECT max(upper(during)) FROM compute.bookings").fetchone()[0]
    runs = []
    for number, floor in enumerate(SAME_ROWS_FLOORS):
        origin = after_all + timedelta(days=1) + number * SAME_ROWS_YEAR
        seeds = [random.Random(rng.random()) for _ in range(clients)]
        runs.append(measure(floor.workload, clients,
                            lambda i, stop, tally, floor=floor, origin=origin: same_rows_client(
                                dsn, floor, groups[i], origin, seeds[i], stop, tally)))
    return runs


def baseline_runs(dsn: str, workload: str, create: str, client: Callable[[str, random.Random, float, ClientTally], None],
                  rng: random.Random) -> list[RunResult]:
    """A baseline workload on its own new table, at each client count."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(create)
    runs = []
    for clients in CLIENT_COUNTS:
        seeds = [random.Random(rng.random()) for _ in range(clients)]
        runs.append(measure(workload, clients, lambda i, stop, tally: client(dsn, seeds[i], stop, tally)))
    return runs


def capacity_queries(dsn: str, pools: list[str], rng: random.Random) -> dict[str, Any]:
    """capacity_free and capacity_earliest, after an ANALYZE so that the admission runs' bookings are known."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE compute.bookings")
        live = conn.execute("SELECT count(*) FROM compute.bookings WHERE state = 'held'").fetchone()[0]
    free, free_rows = capacity_free_latencies(dsn, pools, rng)
    earliest, earliest_answers = capacity_earliest_latencies(dsn, pools, rng)
    return {"live_bookings_at_capacity_queries": live,
            "capacity_free": {**free.summary(), "rows_fetched": free_rows},
            "capacity_earliest": {**earliest.summary(), "answers": earliest_answers}}


def benchmark(cluster: embedded.Cluster) -> dict[str, Any]:
    """Every phase, timed; returns the report."""
    timings: dict[str, float] = {}
    load_at_start = os.getloadavg()
    began = time.perf_counter()
    dsn = cluster.conninfo(DBNAME)
    rng = random.Random(20261130)
    with phase(timings, "migrate"):
        cluster.ensure_database(DBNAME)
        migrate.migrate(dsn)
    with phase(timings, "build fleet"):
        pools = build_fleet(dsn)
    with psycopg.connect(dsn) as conn:
        fleet = fleet_counts(conn)
    with phase(timings, "load bookings"):
        set_quotas(dsn)
        loaded = load_bookings(dsn, pools)
        keep_loaded_state(cluster)
    with phase(timings, "admission runs"):
        admission = admission_runs(cluster, pools, rng)
    with phase(timings, "capacity queries"):
        queries = capacity_queries(dsn, pools, rng)
    with phase(timings, "raw insert runs"):
        raw = baseline_runs(dsn, "raw", CREATE_RAW, raw_client, rng)
    with phase(timings, "two-step runs"):
        two_step = baseline_runs(dsn, "two-step", CREATE_TWO_STEP, two_step_client, rng)
    with phase(timings, "same rows runs"):
        same_rows = same_rows_runs(fresh_copy(cluster), rng)
    timings["total"] = round(time.perf_counter() - began, 2)
    return {
        "machine": machine(load_at_start),
        "fleet": {**fleet, "nodes_per_pool": NODES_PER_POOL, "gpus_per_node": GPUS_PER_NODE, "pool_policies": list(POOL_POLICIES),
                  "layouts": {f"gpu_index_{MIG_GPU_INDEX}": MIG_LAYOUT, f"gpu_index_{SLOT_GPU_INDEX}": SLOT_LAYOUT}},
        "bookings_loaded": loaded,
        "admission": [run.as_json() for run in admission.fresh],
        "admission_filled": {**admission.filled.as_json(), "admitted_before": admission.admitted_before_filled,
                             "free_fraction_of_whole_gpu_time": round(admission.free_fraction_when_filled, 4)},
        "raw_insert": [run.as_json() for run in raw],
        "ratio_admission_to_raw": {str(a.clients): round(a.per_second / r.per_second, 4)
                                   for a, r in zip(admission.fresh, raw, strict=True)},
        "two_step": [run.as_json() for run in two_step],
        "ratio_two_step_to_raw": {str(t.clients): round(t.per_second / r.per_second, 4) for t, r in zip(two_step, raw, strict=True)},
        "same_rows": [run.as_json() for run in same_rows],
        "ratio_admission_to_same_rows_at_8": {run.workload: round(admission.fresh[-1].per_second / run.per_second, 4)
                                              for run in same_rows},
        **queries,
        "targets": targets(admission, two_step, same_rows, queries["capacity_free"]),
        "settings": {"run_seconds": RUN_SECONDS, "clients": list(CLIENT_COUNTS), "shape_weights": SHAPE_WEIGHTS,
                     "admission_transactions": "reserve_hold and activate, one transaction each (autocommit)",
                     "admission_start_state": f"each client count on a fresh copy of {LOADED_DBNAME} (the loaded fleet and history); "
                                                 f"then the last copy filled to {FILL_RESERVATIONS} admissions, one client again",
                     "server_cpu": "utime + stime of each client's backend (/proc/PID/stat) over its run, per success",
                     "cluster": "embedded throwaway cluster, fsync=off, default settings otherwise"},
        "timings_s": timings,
    }


def main() -> int:
    with throwaway_cluster("bc-bench-") as cluster:
        report = benchmark(cluster)
    report["measured_at"] = datetime.now(timezone.utc).isoformat()
    write_section("capacity", report)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
