"""Independent checks of the booking tables: plain SQL, none of our functions, and no index.

An index that misses an entry would hide the very overlap a check looks for (PostgreSQL 15's GiST
scans of bookings_exclusive did, docs/capacity.md), so every check here runs with index scans off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

OVERLAPPING_LIVE_BOOKINGS = """
    SELECT a.booking_id, b.booking_id, a.device_id, a.slices, b.slices, a.shares, b.shares, a.during, b.during
      FROM compute.bookings AS a
      JOIN compute.bookings AS b
        ON b.device_id = a.device_id AND b.booking_id > a.booking_id
       AND b.slices && a.slices AND b.shares && a.shares AND b.during && a.during
     WHERE a.state = 'held' AND b.state = 'held'"""

INDEX_SCANS = ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan")


def rows_read_without_indexes(conn: psycopg.Connection, queries: Mapping[str, str]) -> dict[str, list[tuple[Any, ...]]]:
    """Each query's rows, read with index scans off (and the settings as they were afterwards)."""
    for scan in INDEX_SCANS:
        conn.execute(f"SET {scan} = off")
    try:
        return {name: conn.execute(query).fetchall() for name, query in queries.items()}
    finally:
        for scan in INDEX_SCANS:
            conn.execute(f"RESET {scan}")
