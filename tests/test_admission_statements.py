"""Statements per admission (issue 16 part 3; docs/capacity.md, "Statements per admission").

One admission as the relay makes it (api.prepare, an allow, api.admit) on a small pack pool, its
nested statements seen by auto_explain (as NOTICEs): compute_now reads no table while the clock is
not pinned, and reserve_hold reads its three limits in one statement (compute.limits_get), so the
clock's table is never read (14 times before) and compute.limit's one-limit statement runs at most
five times per admission (8 before: the pending-admission bound, the admission's lifetime,
placement's candidates, the payload bound of two outbox events).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.types.json import Jsonb

from auto_explain import nested_plans
from fleet import WHOLE, make_pool

TENANT = "00000000-0000-4000-8000-0000000000c1"
ADMISSIONS = 3


def admission(sql: psycopg.Connection, pool_id: uuid.UUID) -> None:
    start = datetime.now(timezone.utc) + timedelta(hours=1)
    document = {"pool_id": str(pool_id), "shape": "gpu", "count": 1, "start": start.isoformat(),
                "end": (start + timedelta(hours=2)).isoformat(), "idempotency_key": str(uuid.uuid4())}
    prepared = sql.execute("SELECT api.prepare(%s, %s, %s)", ("reservations.create", TENANT, Jsonb(document))).fetchone()[0]
    admitted = sql.execute("SELECT api.admit(%s, %s)", (prepared["admission_id"],
                                                        Jsonb({"allowed": True, "principal": "user:a"}))).fetchone()[0]
    assert "data" in admitted, admitted


def statement_texts(sql: psycopg.Connection, pool_id: uuid.UUID) -> Counter[str]:
    """The nested statements of ADMISSIONS admissions, by their text (whitespace folded)."""
    with nested_plans(sql) as plans:
        for _ in range(ADMISSIONS):
            admission(sql, pool_id)
    return Counter(re.sub(r"\s+", " ", plan.split("Query Text:", 1)[1]).strip() for plan in plans)


def test_admission_reads_the_clock_table_never_and_single_limits_at_most_five_times(sql: psycopg.Connection) -> None:
    sql.autocommit = True
    pool_id = make_pool(sql, [[WHOLE] * 8] * 4, tenant_id=TENANT)
    admission(sql, pool_id)   # plans made before counting
    texts = statement_texts(sql, pool_id)
    clock = sum(n for text, n in texts.items() if "clock_control" in text)
    limits = sum(n for text, n in texts.items() if text.startswith("SELECT l.value FROM compute.limits AS l WHERE l.name = p_name"))
    assert clock == 0, f"compute_now read compute.clock_control {clock / ADMISSIONS} times per admission"
    assert limits <= 5 * ADMISSIONS, f"compute.limit read a limit {limits / ADMISSIONS} times per admission"


def test_admission_reads_no_booking_twice_and_recomputes_no_busy_summary(sql: psycopg.Connection) -> None:
    """The document passes the rows it joined to readiness and CDI names (it read each booking, its
    reservation and its atom again by id before), and the bookings insert adds the new holds' windows
    to atom_busy (it recomputed each covered atom's summary from bookings before)."""
    sql.autocommit = True
    pool_id = make_pool(sql, [[WHOLE] * 8] * 4, tenant_id=TENANT)
    admission(sql, pool_id)
    texts = statement_texts(sql, pool_id)
    again = sum(n for text, n in texts.items()
                if "WHERE b.booking_id = p_booking_id" in text or "WHERE a.atom_id = p_atom_id" in text)
    recomputed = sum(n for text, n in texts.items() if "range_agg(b.during" in text)
    assert again == 0, f"the document read a booking or atom again {again / ADMISSIONS} times per admission"
    assert recomputed == 0, f"atom_busy was recomputed from bookings {recomputed / ADMISSIONS} times per admission"
