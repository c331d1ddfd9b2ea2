"""What the Prometheus metrics of every control-plane process share (docs/architecture.md §15,
docs/operations.md): a registry of its own per component, the process's collectors (CPU, memory, open
files, Python's GC) in exactly one registry per process, and the text exposition.

`serve all` runs the relay, the gateway and the worker in one process: there the relay's registry
has the process collectors and shows the worker's registry too (`join`), and the gateway's has
neither, so no series is served twice.
"""

from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR,
                               CollectorRegistry, generate_latest)
from prometheus_client.registry import Collector

PROCESS_COLLECTORS: tuple[Collector, ...] = (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR)


class Metrics:
    """One component's registry; with `process`, the process's own series are in it."""

    def __init__(self, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        self.joined: list[CollectorRegistry] = []
        if process:
            for collector in PROCESS_COLLECTORS:
                self.registry.register(collector)

    def join(self, other: Metrics) -> None:
        """Serve `other`'s series with these (one endpoint for two components of one process)."""
        self.joined.append(other.registry)

    def exposition(self) -> tuple[bytes, str]:
        return b"".join(generate_latest(registry) for registry in (self.registry, *self.joined)), CONTENT_TYPE_LATEST
