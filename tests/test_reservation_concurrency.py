"""Reservations under real concurrency (docs/architecture.md §6, §13).

Eight threads, each with its own session (autocommit off, one transaction per operation), run
20,000 random reserve / activate / extend / release / void / renew / expire calls for three
tenants with tight quotas, on a pool of six H200s where whole GPUs, MIG instances and time-slice
slots coexist and one GPU changes layout in the middle of the booked windows. Two sessions move
their own clock forward as they go, so releases truncate running reservations and sweeps expire
provisional ones and lapsed leases; the sessions use different time zones. Every call must
succeed or fail with a contract SQLSTATE. Plain SQL over the tables (none of our functions)
checks exclusivity, atom validity, reservation/booking agreement and both quotas, in repeated
snapshots while the sessions run and once more after them; in the same snapshots, every atom's
free-capacity summary (compute.atom_busy) is recomputed from the bookings and must be equal.

Run with -s to see the outcome counts and the runtime.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from better_compute.errors import from_database
from fleet import MIG_2X_3G, SHAPES, TIMESLICE_4, WHOLE, device_id, make_pool
from table_checks import OVERLAPPING_LIVE_BOOKINGS, rows_read_without_indexes
from test_errors import read_contract

PINNED = datetime(2030, 1, 30, tzinfo=timezone.utc)  # windows reach into February: quotas count two months
LAYOUT_CHANGE_AT = PINNED + timedelta(hours=36)       # node 1's whole GPU 0 becomes two MIG instances
LAYOUTS = (                # atoms: 2 whole GPUs (1 after LAYOUT_CHANGE_AT), 4 MIG 3g.71gb (6 after), 8 slots
    (WHOLE, MIG_2X_3G),
    (WHOLE, TIMESLICE_4),
    (MIG_2X_3G, TIMESLICE_4),
)
TENANTS = tuple(uuid.UUID(int=number) for number in (1, 2, 3))
MAX_ATOMS = 3
GPU_HOURS_PER_MONTH = 30
MAX_COUNT = 2
MAX_DURATION = timedelta(hours=24)

THREADS = 8
OPERATIONS_PER_THREAD = 2_500
CLOCK_MOVING_THREADS = 2
TIME_ZONES = ("UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham")
SEED = 20300130
RECENT_TARGETS = 200          # operations on existing reservations pick among the latest ones
UNKNOWN_TARGET_RATE = 0.02    # ... or, this often, a reservation that does not exist
SHARED_KEYS = 20              # idempotency keys that several requests reuse (replay or mismatch)
WATCH_PAUSE_SECONDS = 0.1     # between two rounds of the invariant checks during the run

OPERATION_WEIGHTS = {"reserve": 45, "extend": 15, "release": 12, "void": 5, "renew": 6, "activate": 5, "expire": 3}
CONTRACT_SQLSTATES = frozenset({"BC400", "BC404", "BC409", "BC422", "BC429", "23P01", "40P01"})
OK = "OK"


def minutes(count: int) -> timedelta:
    return timedelta(minutes=count)


@dataclass(frozen=True)
class Seen:
    """A reservation as a session last saw it."""

    end: datetime
    live: bool
    leased: bool


def anything(_: Seen) -> bool:
    return True


class Reservations:
    """Reservations any session may act on, as last seen by any session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[uuid.UUID, Seen] = {}
        self._ids: list[uuid.UUID] = []

    def record(self, document: dict[str, Any]) -> None:
        reservation_id = uuid.UUID(document["reservation_id"])
        seen = Seen(end=datetime.fromisoformat(document["end"]), live=document["state"] in ("provisional", "active"),
                    leased=document["hold_until"] is not None)
        with self._lock:
            if reservation_id not in self._seen:
                self._ids.append(reservation_id)
            self._seen[reservation_id] = seen

    def pick(self, rng: random.Random, wanted: Callable[[Seen], bool] = anything) -> tuple[uuid.UUID, datetime]:
        """One of the latest reservations that looked `wanted`; now and then one that does not exist."""
        with self._lock:
            recent = list(itertools.islice((reservation_id for reservation_id in reversed(self._ids)
                                            if wanted(self._seen[reservation_id])), RECENT_TARGETS))
            if not recent or rng.random() < UNKNOWN_TARGET_RATE:
                return uuid.uuid4(), PINNED + timedelta(days=1)
            reservation_id = rng.choice(recent)
            return reservation_id, self._seen[reservation_id].end


def contract_code(error: psycopg.Error) -> str | None:
    """The error's contract code, or None when it is outside the contract of these calls."""
    if error.sqlstate not in CONTRACT_SQLSTATES:
        return None
    code = from_database(error).code
    return None if code == "INTERNAL" else code


class Session:
    """One thread's session: its own connection, clock, time zone and random stream."""

    def __init__(self, dsn: str, pool_id: uuid.UUID, reservations: Reservations, number: int) -> None:
        self.conn = psycopg.connect(dsn)  # autocommit off: each operation is one transaction, then commit or rollback
        self.pool_id = pool_id
        self.reservations = reservations
        self.rng = random.Random(SEED + number)
        self.moves_clock = number < CLOCK_MOVING_THREADS
        self.time_zone = TIME_ZONES[number % len(TIME_ZONES)]
        self.now = PINNED
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.sqlstates: Counter[str] = Counter()
        self.unexpected: list[str] = []

    def run(self, operations: int) -> None:
        with self.conn:
            self.conn.execute("SELECT set_config('TimeZone', %s, false), set_config('statement_timeout', '30s', false), "
                              "compute.clock_pin(%s)", (self.time_zone, PINNED))
            self.conn.commit()
            actions = list(OPERATION_WEIGHTS)
            weights = list(OPERATION_WEIGHTS.values())
            while self.outcomes.total() < operations:
                if self.moves_clock:
                    self.advance_clock()
                getattr(self, self.rng.choices(actions, weights)[0])()

    def advance_clock(self) -> None:
        self.now = self.conn.execute("SELECT compute.clock_advance(%s)", (minutes(self.rng.randint(0, 2)),)).fetchone()[0]
        self.conn.commit()

    def call(self, operation: str, statement: str, params: Sequence[Any] = ()) -> Any | None:
        """One operation in its own transaction, its outcome counted; its result, or None when it failed."""
        try:
            result = self.conn.execute(statement, params).fetchone()[0]
            self.conn.commit()
        except psycopg.Error as error:
            self.conn.rollback()
            code = contract_code(error)
            if code is None:
                self.unexpected.append(f"{operation}: SQLSTATE {error.sqlstate}: {error}")
            self.outcomes[operation, code or "UNEXPECTED"] += 1
            self.sqlstates[error.sqlstate or "none"] += 1
            return None
        self.outcomes[operation, OK] += 1
        return result

    def reserve(self) -> None:
        rng = self.rng
        start = None if rng.random() < 0.2 else self.now + minutes(rng.randrange(0, 60 * 60))
        request: dict[str, Any] = {
            "tenant_id": str(rng.choice(TENANTS)), "pool_id": str(self.pool_id), "shape": rng.choice(SHAPES),
            "count": rng.randint(1, MAX_COUNT), "start": start and start.isoformat(),
            "end": ((start or self.now) + minutes(rng.randrange(30, 12 * 60))).isoformat(),
            "idempotency_key": f"shared-{rng.randrange(SHARED_KEYS)}" if rng.random() < 0.05 else str(uuid.uuid4()),
        }
        if rng.random() < 0.25:
            request["hold_seconds"] = rng.randrange(600, 4 * 3600)
        document = self.call("reserve", "SELECT compute.reserve(%s)", (Jsonb(request),))
        self.record(document)
        if document is not None and rng.random() < 0.85:
            self.record(self.call("activate", "SELECT compute.reservation_activate(%s)",
                                  (uuid.UUID(document["reservation_id"]),)))

    def extend(self) -> None:
        reservation_id, end = self.reservations.pick(self.rng, lambda seen: seen.live)
        new_end = end + minutes(self.rng.randrange(-4 * 60, 10 * 60))
        self.record(self.call("extend", "SELECT compute.reservation_extend(%s, %s)", (reservation_id, new_end)))

    def on_a_reservation(self, operation: str, function: str, wanted: Callable[[Seen], bool] = anything) -> None:
        reservation_id, _ = self.reservations.pick(self.rng, wanted)
        self.record(self.call(operation, f"SELECT compute.{function}(%s)", (reservation_id,)))

    def record(self, document: dict[str, Any] | None) -> None:
        if document is not None:
            self.reservations.record(document)

    def release(self) -> None:
        self.on_a_reservation("release", "reservation_release", lambda seen: seen.live)

    def void(self) -> None:
        self.on_a_reservation("void", "reservation_void")

    def renew(self) -> None:
        self.on_a_reservation("renew", "reservation_renew", lambda seen: seen.live and seen.leased)

    def activate(self) -> None:
        self.on_a_reservation("activate", "reservation_activate")

    def expire(self) -> None:
        self.call("expire", "SELECT compute.reservations_expire()")


def build_contended_pool(conn: psycopg.Connection) -> uuid.UUID:
    """The pool of LAYOUTS with node 1's GPU 0 turning MIG at LAYOUT_CHANGE_AT, and every tenant's quota."""
    conn.execute("SELECT compute.clock_pin(%s)", (PINNED,))
    pool_id = make_pool(conn, LAYOUTS, max_count=MAX_COUNT, max_duration=MAX_DURATION)
    conn.execute("SELECT compute.device_set_layout(%s, %s, %s)",
                 (device_id(conn, pool_id, 1, 0), MIG_2X_3G, LAYOUT_CHANGE_AT))
    for tenant_id in TENANTS:
        conn.execute("SELECT compute.quota_set(%s, NULL, %s, %s, %s)", (tenant_id, pool_id, MAX_ATOMS, GPU_HOURS_PER_MONTH))
    conn.commit()
    return pool_id


# Independent checks: plain SQL over the tables, calling none of our functions, read without indexes
# (table_checks). Each lists violations.
INVARIANTS = {
    "live bookings sharing a device's slice and share at one instant": OVERLAPPING_LIVE_BOOKINGS,
    "live bookings outside their atom (validity, device, slices or shares)": """
        SELECT b.booking_id, b.during, a.valid
          FROM compute.bookings AS b JOIN compute.atoms AS a ON a.atom_id = b.atom_id
         WHERE b.state = 'held'
           AND (NOT a.valid @> b.during OR (a.device_id, a.slices, a.shares) <> (b.device_id, b.slices, b.shares))""",
    "reservations whose bookings disagree with them (count, state or window)": """
        SELECT r.reservation_id, r.state, r.count, r.during, b.bookings, b.states, b.windows
          FROM compute.reservations AS r
          JOIN LATERAL (SELECT count(*) AS bookings, array_agg(DISTINCT x.state) AS states,
                               array_agg(DISTINCT x.during) AS windows
                          FROM compute.bookings AS x WHERE x.reservation_id = r.reservation_id) AS b ON true
         WHERE b.bookings <> r.count OR b.windows <> ARRAY[r.during]
            OR b.states <> ARRAY[CASE WHEN r.state IN ('provisional', 'active') THEN 'held'
                                      WHEN r.state IN ('released', 'expired') THEN 'released' ELSE 'void' END]""",
    "instants where a tenant holds more live atoms than max_atoms": """
        SELECT q.tenant_id, lower(s.during) AS instant, count(*) AS held, q.max_atoms
          FROM compute.quotas AS q
          JOIN compute.bookings AS s
            ON s.tenant_id = q.tenant_id AND s.pool_id = q.pool_id AND s.state = 'held'
          JOIN compute.bookings AS b
            ON b.tenant_id = q.tenant_id AND b.pool_id = q.pool_id AND b.state = 'held'
           AND lower(b.during) <= lower(s.during) AND lower(s.during) < upper(b.during)
         WHERE q.project_id IS NULL AND q.max_atoms IS NOT NULL
         GROUP BY q.quota_id, q.tenant_id, q.max_atoms, s.booking_id, lower(s.during)
        HAVING count(*) > q.max_atoms""",
    "UTC months where a tenant booked more GPU-hours than gpu_hours_per_month": """
        WITH months AS (
            SELECT m AT TIME ZONE 'UTC' AS month_start, (m + interval '1 month') AT TIME ZONE 'UTC' AS month_end
              FROM generate_series((SELECT date_trunc('month', min(lower(during)) AT TIME ZONE 'UTC') FROM compute.bookings),
                                   (SELECT date_trunc('month', max(upper(during)) AT TIME ZONE 'UTC') FROM compute.bookings),
                                   interval '1 month') AS m
        )
        SELECT q.tenant_id, m.month_start, q.gpu_hours_per_month,
               sum(b.gpu_fraction * extract(epoch FROM least(upper(b.during), m.month_end)
                                                      - greatest(lower(b.during), m.month_start)) / 3600) AS hours
          FROM compute.quotas AS q
         CROSS JOIN months AS m
          JOIN compute.bookings AS b
            ON b.tenant_id = q.tenant_id AND b.pool_id = q.pool_id AND b.state IN ('held', 'released')
           AND lower(b.during) < m.month_end AND upper(b.during) > m.month_start
         WHERE q.project_id IS NULL AND q.gpu_hours_per_month IS NOT NULL
         GROUP BY q.quota_id, q.tenant_id, q.gpu_hours_per_month, m.month_start
        HAVING sum(b.gpu_fraction * extract(epoch FROM least(upper(b.during), m.month_end)
                                                     - greatest(lower(b.during), m.month_start)) / 3600)
               > q.gpu_hours_per_month + 1e-9""",
}


# Every atom's summary against its bookings recomputed here, both from %(now)s on: the latest clock of
# any session, so at or after the instant each writer trimmed the past from the summary at; and the
# atom's place and validity that the summary's row carries against the atom's own.
BUSY_SUMMARY_DIFFERS = """
    SELECT a.atom_id, s.busy * tstzmultirange(tstzrange(%(now)s, NULL)) AS kept, coalesce(c.busy, '{}') AS computed
      FROM compute.atoms AS a
      LEFT JOIN compute.atom_busy AS s ON s.atom_id = a.atom_id
      LEFT JOIN LATERAL (SELECT range_agg(b.during * tstzrange(%(now)s, NULL)) AS busy
                           FROM compute.atoms AS x JOIN compute.bookings AS b ON b.atom_id = x.atom_id
                          WHERE x.device_id = a.device_id AND x.slices && a.slices AND x.shares && a.shares
                            AND b.state = 'held' AND upper(b.during) > %(now)s) AS c ON true
     WHERE s.atom_id IS NULL
        OR (s.node_id, s.pool_id, s.shape, s.node_rank, s.device_index, s.device_id, s.slices, s.slot, s.valid)
           IS DISTINCT FROM (a.node_id, a.pool_id, a.shape, a.node_rank, a.device_index, a.device_id, a.slices, a.slot, a.valid)
        OR s.busy * tstzmultirange(tstzrange(%(now)s, NULL)) <> coalesce(c.busy, '{}')"""


def invariant_violations(conn: psycopg.Connection, latest_clock: Callable[[], datetime]) -> dict[str, list[tuple[Any, ...]]]:
    """The invariants' violations in one snapshot (the caller's transaction), the busy summaries last:
    the latest clock is read once the snapshot is taken, so no change it shows was made later."""
    violations = rows_read_without_indexes(conn, INVARIANTS)
    violations["atoms whose busy summary differs from their bookings"] = conn.execute(
        BUSY_SUMMARY_DIFFERS, {"now": latest_clock()}).fetchall()
    return {name: rows for name, rows in violations.items() if rows}


class Watcher:
    """Checks the invariants again and again while the sessions run, each round in one snapshot.

    Every committed state must keep them, and most bookings end (released, void) before the run
    does: a violation that only lived for a while is caught here, not by the final check."""

    def __init__(self, dsn: str, latest_clock: Callable[[], datetime]) -> None:
        self.conn = psycopg.connect(dsn)
        self.latest_clock = latest_clock
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self.finished = threading.Event()
        self.rounds = 0
        self.violations: dict[str, list[tuple[Any, ...]]] = {}

    def run(self) -> None:
        with self.conn:
            while not self.finished.wait(WATCH_PAUSE_SECONDS):
                for name, rows in invariant_violations(self.conn, self.latest_clock).items():
                    self.violations.setdefault(name, rows)
                self.conn.commit()
                self.rounds += 1


def print_summary(outcomes: Counter[tuple[str, str]], sqlstates: Counter[str], seconds: float, watch_rounds: int) -> None:
    total = outcomes.total()
    codes = sorted({code for _, code in outcomes}, key=lambda code: (code != OK, code))
    print(f"\n{total} operations by {THREADS} sessions in {seconds:.1f} s ({total / seconds:.0f}/s); "
          f"invariants checked in {watch_rounds} snapshots during the run and once after it")
    print(f"{'operation':<10}" + "".join(f"{code:>21}" for code in codes))
    for operation in OPERATION_WEIGHTS:
        print(f"{operation:<10}" + "".join(f"{outcomes[operation, code]:>21}" for code in codes))
    print("failures by SQLSTATE: " + ", ".join(f"{state} {count}" for state, count in sqlstates.most_common()))


def outcome_total(outcomes: Counter[tuple[str, str]], code: str) -> int:
    return sum(count for (_, outcome), count in outcomes.items() if outcome == code)


def describe(violations: dict[str, list[tuple[Any, ...]]]) -> str:
    return "\n".join(f"{name}: {len(rows)}, e.g. {rows[:3]}" for name, rows in violations.items())


def test_concurrent_reservations_keep_exclusivity_validity_and_quotas(db: psycopg.Connection, db_dsn: str) -> None:
    read_contract(db)  # as a process does when it opens its pool: the sessions map their errors with it
    pool_id = build_contended_pool(db)
    reservations = Reservations()
    sessions = [Session(db_dsn, pool_id, reservations, number) for number in range(THREADS)]
    watcher = Watcher(db_dsn, lambda: max(session.now for session in sessions))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=THREADS + 1) as executor:
        watching = executor.submit(watcher.run)
        try:
            for future in [executor.submit(session.run, OPERATIONS_PER_THREAD) for session in sessions]:
                future.result()
        finally:
            watcher.finished.set()
        watching.result()
    seconds = time.monotonic() - started

    outcomes = sum((session.outcomes for session in sessions), Counter())
    print_summary(outcomes, sum((session.sqlstates for session in sessions), Counter()), seconds, watcher.rounds)

    unexpected = [message for session in sessions for message in session.unexpected]
    assert not unexpected, f"{len(unexpected)} errors outside the contract, the first ones:\n" + "\n".join(unexpected[:5])

    assert outcomes.total() >= THREADS * OPERATIONS_PER_THREAD
    assert outcomes["reserve", OK] >= 1_000
    assert outcomes["extend", OK] >= 300 and outcomes["release", OK] >= 300 and outcomes["renew", OK] >= 100
    assert outcome_total(outcomes, "CAPACITY_CONFLICT") >= 500
    assert outcome_total(outcomes, "QUOTA_EXCEEDED") >= 500

    assert not watcher.violations, "during the run:\n" + describe(watcher.violations)
    final = invariant_violations(db, lambda: max(session.now for session in sessions))
    assert not final, "after the run:\n" + describe(final)
