"""Admission's plans follow the bookings table's growth (docs/capacity.md, "Plans on a growing fleet").

A long-lived connection admits its first reservations while the fleet's bookings table is empty, so
PL/pgSQL caches plans made for empty tables. The table then grows by thousands of bookings; the
worker's `tables.analyze` step (worker_api.tables_analyze, as role bc_worker) analyses what grew,
and ANALYZE invalidates the plans cached on that table in every session. On the SAME connection,
auto_explain (nested statements, as NOTICEs) then shows the plans admission runs: the candidate scan
walks atom_busy_pack_order and reads each atom's busy windows on the row it walks (compute.atom_busy),
never bookings, and no statement of admission reads a fleet table sequentially.
"""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.types.json import Jsonb

from better_compute.db import Database
from auto_explain import nested_plans
from booking_history import add_history
from fleet import WHOLE, make_pool

TENANTS = 50
FLEET_TABLES = ("bookings", "reservations", "atoms", "atom_busy", "devices", "nodes")
CANDIDATE_SCAN = "array_agg(ROW(c.atom_id"   # both statements of compute.place_candidates


def tenant(number: int) -> str:
    return f"00000000-0000-4000-8000-{number:012d}"


def admit(conn: psycopg.Connection, pool_id: str, rng: random.Random, count: int) -> None:
    """Reserve and activate `count` reservations of 1-2 GPUs in random windows, one transaction each."""
    now = datetime.now(timezone.utc)
    for _ in range(count):
        start = (now + timedelta(seconds=rng.uniform(60, 30 * 86400))).replace(second=0, microsecond=0)
        request = {"tenant_id": tenant(rng.randrange(TENANTS)), "pool_id": pool_id, "shape": "gpu", "count": rng.randint(1, 2),
                   "start": start.isoformat(), "end": (start + timedelta(hours=rng.randint(1, 48))).isoformat()}
        document = conn.execute("SELECT compute.reserve(%s)", (Jsonb(request),)).fetchone()[0]
        conn.execute("SELECT compute.reservation_activate(%s)", (document["reservation_id"],))


def admission_plans(conn: psycopg.Connection, pool_id: str, rng: random.Random) -> list[str]:
    """The plans of every statement a few admissions run on `conn`, from auto_explain as NOTICEs."""
    with nested_plans(conn) as plans:
        admit(conn, pool_id, rng, 3)
    return plans


def sequential_scans(plan: str) -> list[str]:
    return [table for table in re.findall(r"Seq Scan on (\w+)", plan) if table in FLEET_TABLES]


def test_after_growth_the_candidate_scan_uses_index_scans(db: psycopg.Connection, db_dsn: str, wdb: Database) -> None:
    pool_id = str(make_pool(db, [[WHOLE] * 6] * 200, shapes=("gpu",)))   # 1,200 GPUs
    for number in range(TENANTS):
        db.execute("SELECT compute.quota_set(%s, NULL, %s, 100000, 100000000)", (tenant(number), pool_id))
    db.execute("SELECT pg_stat_force_next_flush()")   # its counts reach pg_stat_all_tables when this commits
    db.commit()
    rng = random.Random(19)
    with psycopg.connect(db_dsn, autocommit=True) as long_lived:
        admit(long_lived, pool_id, rng, 30)                                # plans made for an empty table
        grown = add_history(db_dsn, [pool_id], per_atom=25, first_slot=0, tenants=TENANTS)
        admit(long_lived, pool_id, rng, 10)                                # ... and still used after the growth
        analysed = wdb.call("worker_api.tables_analyze")                   # the worker's periodic step
        plans = admission_plans(long_lived, pool_id, rng)

    assert grown == 30000
    assert analysed >= 2, "bookings and reservations grew by far more than a factor: both analysed"
    candidate_scans = [plan for plan in plans if CANDIDATE_SCAN in plan]
    assert candidate_scans, "auto_explain showed no candidate scan"
    for plan in candidate_scans:
        assert "Index Scan using atom_busy_pack_order on atom_busy" in plan, plan
        assert "atom_busy_pkey" not in plan, plan
        assert " on bookings" not in plan, plan
    scanned = {plan.split("Query Text:")[1].strip()[:120]: sequential_scans(plan) for plan in plans if sequential_scans(plan)}
    assert not scanned, f"admission statements reading fleet tables sequentially: {scanned}"
