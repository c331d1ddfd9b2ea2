"""Python's Clock is anchored to compute_now() and moved by a monotonic clock (P9)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from better_compute.clock import Clock

PINNED = datetime(2030, 6, 1, 12, 0, tzinfo=timezone.utc)


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


def test_clock_starts_from_the_pinned_database_time(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_pin(%s)", (PINNED,))
    ticks = Ticks()
    clock = Clock.anchored(db, "api.now", monotonic=ticks)
    assert clock.now() == PINNED
    ticks.value += 4.5
    assert clock.now() == PINNED + timedelta(seconds=4.5)
    assert clock.age(PINNED) == timedelta(seconds=4.5)


def test_each_client_role_reads_the_clock_through_its_schema(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_pin(%s)", (PINNED,))
    for role, function in [("bc_api", "api.now"), ("bc_gateway", "node_api.now"),
                           ("bc_worker", "worker_api.now"), ("bc_operator", "ops.now")]:
        db.execute(f"SET ROLE {role}")
        assert Clock.anchored(db, function, monotonic=Ticks()).now() == PINNED
        db.execute("RESET ROLE")


def test_clock_follows_database_time_not_the_wall_clock(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_advance('10 days')")
    clock = Clock.anchored(db, "api.now")
    database_now = db.execute("SELECT now()").fetchone()[0]
    assert clock.now() - database_now >= timedelta(days=10)


def test_clock_needs_an_aware_anchor() -> None:
    with pytest.raises(ValueError):
        Clock(datetime(2030, 1, 1))
