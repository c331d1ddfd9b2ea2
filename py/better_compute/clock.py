"""Python's business time (P9): compute_now() read once, then moved forward by the monotonic clock.

Nothing in Python reads the wall clock for business time. A Clock is anchored to the database at
connect; a test that pins compute_now() in the database pins what the Clock starts from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg
from psycopg import sql

from better_compute.db import function_identifier


class Clock:
    def __init__(self, anchor: datetime, monotonic: Callable[[], float] = time.monotonic):
        if anchor.tzinfo is None:
            raise ValueError("a Clock's anchor must carry a time zone")
        self._anchor = anchor
        self._monotonic = monotonic
        self._started = monotonic()

    @classmethod
    def anchored(cls, conn: psycopg.Connection, function: str = "api.now",
                 monotonic: Callable[[], float] = time.monotonic) -> Clock:
        """Anchor to the database's compute_now(), read through the role's schema (api.now, …)."""
        row = conn.execute(sql.SQL("SELECT {}()").format(function_identifier(function))).fetchone()
        assert row is not None
        return cls(row[0], monotonic)

    def now(self) -> datetime:
        return self._anchor + timedelta(seconds=self._monotonic() - self._started)

    def age(self, since: datetime) -> timedelta:
        """How long ago `since` was, in business time (what gateways report instead of timestamps)."""
        return self.now() - since
