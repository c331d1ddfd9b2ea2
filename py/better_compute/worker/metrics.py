"""Prometheus metrics of the worker (docs/architecture.md §15, docs/operations.md): its own work (items by
kind and outcome, handler time) and the fleet gauges, which the database computes in one bounded
function (worker_api.fleet_metrics, sql/560_fleet_metrics.sql). `serve worker --metrics-port` serves them.

The fleet read is bounded twice more here: answers are reused for `cache_seconds` (however many
Prometheus servers scrape), and one read waits at most `timeout_seconds` for a connection and runs at
most as long (statement_timeout). A read that fails is logged and counted, and that scrape has no
fleet series (an alert on their absence fires).
Label values are bounded: `kind` is a kind this worker has a handler for or "unknown".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from better_compute.db import Database
from better_compute.metrics import Metrics

log = logging.getLogger(__name__)

FLEET_QUERY = "SELECT metric, help, labels, value FROM worker_api.fleet_metrics()"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class FleetBounds:
    cache_seconds: float = 10.0
    timeout_seconds: float = 5.0


class FleetCollector(Collector):
    """The fleet gauges, read from the database at most once per `cache_seconds`."""

    def __init__(self, db: Database, bounds: FleetBounds, errors: Counter, read_seconds: Gauge):
        self.db = db
        self.bounds = bounds
        self.errors = errors
        self.read_seconds = read_seconds
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.read_at = float("-inf")

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # the series come from the database: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.lock:
            if time.monotonic() - self.read_at >= self.bounds.cache_seconds:
                self.rows = self.read()
                self.read_at = time.monotonic()
            rows = self.rows
        yield from families(rows)

    def read(self) -> list[dict[str, Any]]:
        started = time.perf_counter()
        try:
            with self.db.pool.connection(timeout=self.bounds.timeout_seconds) as conn, conn.transaction():
                conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, true)",
                             [f"{int(self.bounds.timeout_seconds * 1000)}ms"])
                with conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
                    rows = cursor.execute(FLEET_QUERY).fetchall()
        except psycopg.Error as error:
            log.warning("fleet metrics: the database did not answer (%s); this scrape has none", error)
            self.errors.inc()
            return []
        self.read_seconds.set(time.perf_counter() - started)
        return rows


def families(rows: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
    """One gauge family per metric, its label names those of its first row."""
    by_name: dict[str, tuple[GaugeMetricFamily, list[str]]] = {}
    for row in rows:
        labels: dict[str, str] = row["labels"]
        if row["metric"] not in by_name:
            names = sorted(labels)
            by_name[row["metric"]] = GaugeMetricFamily(row["metric"], row["help"], labels=names), names
        family, names = by_name[row["metric"]]
        family.add_metric([labels[name] for name in names], row["value"])
    yield from (family for family, _names in by_name.values())


class WorkerMetrics(Metrics):
    """The worker's registry: its work, the fleet gauges (unless `fleet` is off: a worker nobody scrapes), and
    the process's own series (unless `serve all` shows them with the relay's)."""

    def __init__(self, db: Database, kinds: Collection[str], process: bool = True, fleet: bool = True,
                 bounds: FleetBounds = FleetBounds()):
        super().__init__(process)
        registry = self.registry
        self.kinds = frozenset(kinds)
        self.items = Counter("bc_worker_items_total", "Work items this worker ran, by kind and outcome "
                             "(done, failed, unsupported).", ["kind", "outcome"], registry=registry)
        self.seconds = Histogram("bc_worker_item_seconds", "Time a handler took, by kind.", ["kind"],
                                 buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300), registry=registry)
        self.running = Gauge("bc_worker_items_running", "Work items running in this worker now.", registry=registry)
        if fleet:
            self.read_fleet(db, bounds)

    def read_fleet(self, db: Database, bounds: FleetBounds) -> None:
        errors = Counter("bc_worker_fleet_read_errors_total", "Reads of worker_api.fleet_metrics that failed.",
                         registry=self.registry)
        read_seconds = Gauge("bc_worker_fleet_read_seconds", "How long the last read of worker_api.fleet_metrics took.",
                             registry=self.registry)
        self.registry.register(FleetCollector(db, bounds, errors, read_seconds))

    def ran(self, kind: str, outcome: str, seconds: float | None = None) -> None:
        label = kind if kind in self.kinds else UNKNOWN
        self.items.labels(label, outcome).inc()
        if seconds is not None:
            self.seconds.labels(label).observe(seconds)


@contextmanager
def served(metrics: Metrics, host: str, port: int | None) -> Iterator[None]:
    """GET /metrics on host:port while the block runs (port 0: any free one; None: not served)."""
    if port is None:
        yield
        return
    server, thread = start_http_server(port, host, registry=metrics.registry)
    log.info("metrics on http://%s:%d/metrics", host if ":" not in host else f"[{host}]", server.server_port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
