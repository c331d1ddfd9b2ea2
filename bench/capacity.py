"""Capacity benchmark (`make bench`; a measurement, not a test).

In one throwaway cluster: build a 1,000-node H200 fleet from the real inventory fixture, load over a
million historical bookings, keep that state as a template database, then measure
  - reservations admitted per second (compute.reserve, then compute.reservation_activate, each in
    its own transaction as the admission flow does: reserve, IAM decision, activate) at 1, 2 and 8
    concurrent clients, each run on a fresh copy of the loaded state (so that the client counts
    compare: a run fills the pools, and placement slows as they fill), with latencies, the
    conflict rate and the rate in each quarter of the run (the fill effect);
  - the raw insert rate into a table with the same exclusion constraint, same clients, same duration;
  - the two-step floor: one row inserted, then updated, in two transactions, into a table with the
    same partial exclusion constraint: the most any two-transaction admission can reach;
  - the same rows a reservation writes, straight into the real tables (no placement);
  - capacity_free and capacity_earliest latencies with the history present.
Prints a table, checks the issue's targets, and writes every figure to the "capacity" section of .bc/bench.json.
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
NODES_PER_POOL = 250
GPUS_PER_NODE = 8
MIG_GPU_INDEX, MIG_LAYOUT = 6, "mig:3g.71gb@0,3g.71gb@4"
SLOT_GPU_INDEX, SLOT_LAYOUT = 7, "timeslice:4"
SHAPES = ("gpu", "mig:3g.71gb", "slot")
OFFERING_MAX_COUNT, OFFERING_MAX_DURATION = 64, timedelta(days=30)

TENANTS = 1000
TENANTS_PER_CLIENT = 100
HISTORY_PER_ATOM_PAIR = 84          # x 6,000 atom pairs x 2 atoms = 1,008,000 released bookings
HISTORY_SLOT = timedelta(hours=50)  # one booking per atom per slot: 84 slots = 175 days back
FUTURE_PER_ATOM_PAIR = 2            # active bookings per atom pair in the next 30 days,
FUTURE_SLOT = timedelta(days=15)    # one per atom per 15 days

CLIENT_COUNTS = (1, 2, 8)
RUN_SECONDS = 20
BOOKING_HORIZON = timedelta(days=30)
SHAPE_WEIGHTS = {"gpu": 0.8, "mig:3g.71gb": 0.1, "slot": 0.1}
CAPACITY_FREE_CALLS = 200
WHOLE_GPUS_PER_POOL = NODES_PER_POOL * (GPUS_PER_NODE - 2)
# capacity_earliest: (shape, count, hours); the last asks for every whole GPU of a pool, so it must search
# past the last live booking (about 30 days ahead).
EARLIEST_CASES = (("gpu", 1, 24), ("gpu", 8, 48), ("gpu", 64, 24), ("mig:3g.71gb", 2, 12), ("slot", 16, 6),
                  ("gpu", WHOLE_GPUS_PER_POOL, 24))

TARGET_RATIO_AT_8 = 0.5
TARGET_CAPACITY_FREE_P50_MS = 5.0
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
    return RunResult(workload, clients, round(seconds, 3), sum(t.succeeded for t in tallies), dict(conflicts), dict(errors),
                     latencies.summary(), [round(quarters[q] * 4 / seconds, 1) for q in range(4)])


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
                "count": self.rng.randint(1, 2),
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
    time the attempt; a database error is a conflict or an error of the tally."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < stop_at:
            drawn = draw()
            started = time.perf_counter()
            try:
                attempt(conn, drawn)
            except psycopg.Error as error:
                classify(error, tally)
                continue
            tally.success(started)


def admission_client(dsn: str, maker: RequestMaker, stop_at: float, tally: ClientTally) -> None:
    """reserve, then activate, each in its own transaction (autocommit), until stop_at."""
    def admit(conn: psycopg.Connection, request: dict[str, object]) -> None:
        document = conn.execute("SELECT compute.reserve(%s)", (Jsonb(request),)).fetchone()[0]
        conn.execute("SELECT compute.reservation_activate(%s)", (document["reservation_id"],))
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
    """The loaded fleet and history become the template LOADED_DBNAME (a file copy, a second or two).

    A template must have no session, and the migration runner's (yoyo) connection to DBNAME stays
    open, idle, until Python collects it: end such leftovers first."""
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_terminate_backend(pid, 5000) FROM pg_catalog.pg_stat_activity WHERE datname = %s",
                     (DBNAME,))
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
    print(f"Admission = SELECT compute.reserve(...), then SELECT compute.reservation_activate(...): two transactions, "
          f"each client count on a fresh copy of the loaded state. Raw = one INSERT per transaction into bench_raw. "
          f"Two-step = one INSERT, then one UPDATE of that row, two transactions, into bench_two_step. {RUN_SECONDS} s per run.")
    print()
    runs = list(zip(report["admission"], report["raw_insert"], report["two_step"], strict=True))
    print_table(("clients", "reserv/s", "reserv/s by quarter of the run", "raw ins/s", "2-step/s", "adm/raw", "2-step/raw", "adm/2-step"),
                [(adm["clients"], f"{adm['per_second']:.1f}", " / ".join(f"{rate:.0f}" for rate in adm["per_second_by_quarter"]),
                  f"{ins['per_second']:.1f}", f"{two['per_second']:.1f}", f"{adm['per_second'] / ins['per_second']:.3f}",
                  f"{two['per_second'] / ins['per_second']:.3f}", f"{adm['per_second'] / two['per_second']:.3f}")
                 for adm, ins, two in runs])
    print()
    print_table(("clients", "conflicts", "errors", "res p50 ms", "res p99 ms", "raw p50 ms", "raw p99 ms", "2-step p50", "2-step p99"),
                [(adm["clients"], f"{adm['conflict_rate']:.1%}", sum(adm["errors"].values()), adm["latency"]["p50_ms"],
                  adm["latency"]["p99_ms"], ins["latency"]["p50_ms"], ins["latency"]["p99_ms"], two["latency"]["p50_ms"],
                  two["latency"]["p99_ms"])
                 for adm, ins, two in runs])
    for adm in report["admission"]:
        for outcome, count in sorted((adm["conflicts"] | adm["errors"]).items()):
            print(f"  {adm['clients']} client(s): {count} x {outcome}")
    same = report["same_rows"]
    print(f"Same rows (a reservation and its booking inserted straight into the real tables, no placement), "
          f"{same['clients']} clients: {same['per_second']:.1f}/s, p50 {same['latency']['p50_ms']} ms; "
          f"admission / same rows: {report['ratio_admission_to_same_rows_at_8']:.3f}")
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


def targets(admission: list[RunResult], raw: list[RunResult], two_step: list[RunResult], free: dict[str, Any]) -> list[dict[str, object]]:
    at_8 = {r.workload: r for r in (*admission, *raw, *two_step) if r.clients == max(CLIENT_COUNTS)}
    ratio = at_8["admission"].per_second / at_8["raw"].per_second
    ceiling = at_8["two-step"].per_second / at_8["raw"].per_second
    return [
        {"name": f"reservations/s >= {TARGET_RATIO_AT_8} x raw inserts/s at {max(CLIENT_COUNTS)} clients",
         "measured": f"{ratio:.3f} (the two-step floor, which does nothing but insert and update one row, "
                     f"reaches {ceiling:.3f})",
         "needs": f">= {TARGET_RATIO_AT_8}", "met": ratio >= TARGET_RATIO_AT_8},
        {"name": "capacity_free p50", "measured": f"{free['p50_ms']} ms", "needs": f"< {TARGET_CAPACITY_FREE_P50_MS} ms",
         "met": free["p50_ms"] is not None and free["p50_ms"] < TARGET_CAPACITY_FREE_P50_MS},
    ]


# -- main ------------------------------------------------------------------------------------------


def admission_runs(cluster: embedded.Cluster, pools: list[str], rng: random.Random) -> list[RunResult]:
    """Admission at each client count, each on a fresh copy of the loaded state; client i books for its
    own tenants i*100 .. i*100+99. The last run's database stays (the capacity queries read it)."""
    runs = []
    for clients in CLIENT_COUNTS:
        dsn = fresh_copy(cluster)
        makers = [RequestMaker(pools, i * TENANTS_PER_CLIENT, random.Random(rng.random())) for i in range(clients)]
        runs.append(measure("admission", clients, lambda i, stop, tally: admission_client(dsn, makers[i], stop, tally)))
    return runs


# The same rows a reservation of one whole GPU writes (reservation, booking), into the real tables
# with all their constraints, indexes and triggers, but without placement, quota or idempotency:
# what the admission flow costs on top of its own writes. Windows start in a year, at random.
INSERT_SAME_ROWS = """
WITH reservation AS (
    INSERT INTO compute.reservations (reservation_id, tenant_id, site_id, pool_id, shape, count, during, state, request_hash,
                                      created_at, activated_at)
    SELECT gen_random_uuid(), %(tenant)s, a.site_id, a.pool_id, a.shape, 1, tstzrange(%(start)s, %(end)s), 'active', 'raw',
           now(), now()
      FROM compute.atoms AS a WHERE a.atom_id = %(atom)s
    RETURNING *)
INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares,
                              gpu_fraction, during, state)
SELECT r.reservation_id, r.tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id, a.slices, a.shares,
       a.gpu_fraction, r.during, 'active'
  FROM reservation AS r JOIN compute.atoms AS a ON a.atom_id = %(atom)s
"""


def same_rows_client(dsn: str, atoms: list[str], rng: random.Random, stop_at: float, tally: ClientTally) -> None:
    """One reservation and its booking per transaction on a random whole GPU, until stop_at."""
    def draw() -> dict[str, object]:
        start = datetime.now(timezone.utc) + timedelta(days=365, seconds=rng.uniform(0, 365 * 86400))
        return {"tenant": tenant_id(rng.randrange(TENANTS)), "atom": rng.choice(atoms),
                "start": start, "end": start + timedelta(hours=rng.randint(1, 48))}
    client_loop(dsn, stop_at, tally, draw, lambda conn, params: conn.execute(INSERT_SAME_ROWS, params))


def same_rows_run(dsn: str, rng: random.Random) -> RunResult:
    with psycopg.connect(dsn) as conn:
        atoms = [str(row[0]) for row in conn.execute("SELECT atom_id FROM compute.atoms WHERE shape = 'gpu' AND upper_inf(valid)")]
    seeds = [random.Random(rng.random()) for _ in range(max(CLIENT_COUNTS))]
    return measure("same rows", max(CLIENT_COUNTS), lambda i, stop, tally: same_rows_client(dsn, atoms, seeds[i], stop, tally))


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
    with phase(timings, "same rows run"):
        same_rows = same_rows_run(fresh_copy(cluster), rng)
    timings["total"] = round(time.perf_counter() - began, 2)
    return {
        "machine": machine(load_at_start),
        "fleet": {**fleet, "nodes_per_pool": NODES_PER_POOL, "gpus_per_node": GPUS_PER_NODE, "pool_policies": list(POOL_POLICIES),
                  "layouts": {f"gpu_index_{MIG_GPU_INDEX}": MIG_LAYOUT, f"gpu_index_{SLOT_GPU_INDEX}": SLOT_LAYOUT}},
        "bookings_loaded": loaded,
        "admission": [run.as_json() for run in admission],
        "raw_insert": [run.as_json() for run in raw],
        "ratio_admission_to_raw": {str(a.clients): round(a.per_second / r.per_second, 4) for a, r in zip(admission, raw, strict=True)},
        "two_step": [run.as_json() for run in two_step],
        "ratio_two_step_to_raw": {str(t.clients): round(t.per_second / r.per_second, 4) for t, r in zip(two_step, raw, strict=True)},
        "same_rows": same_rows.as_json(),
        "ratio_admission_to_same_rows_at_8": round(admission[-1].per_second / same_rows.per_second, 4),
        **queries,
        "targets": targets(admission, raw, two_step, queries["capacity_free"]),
        "settings": {"run_seconds": RUN_SECONDS, "clients": list(CLIENT_COUNTS), "shape_weights": SHAPE_WEIGHTS,
                     "admission_transactions": "reserve and activate, one transaction each (autocommit)",
                     "admission_start_state": f"each client count on a fresh copy of {LOADED_DBNAME} (the loaded fleet and history)",
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
