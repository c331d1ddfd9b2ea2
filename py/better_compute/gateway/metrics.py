"""Prometheus metrics of the gateway (docs/architecture.md §15), served at GET /metrics on the gateway's port.

Label values are bounded (docs/architecture.md §14): `type` is a protocol message type or "unknown", `code` a
contract error code or "other", `direction` in or out.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from better_compute.errors import code_statuses
from better_compute.metrics import Metrics
from better_compute.nodeproto import TYPES

UNKNOWN = "unknown"
OTHER = "other"


class GatewayMetrics(Metrics):
    def __init__(self, process: bool = True) -> None:
        super().__init__(process)
        self.sessions = Gauge("bc_gateway_sessions", "Node sessions open on this gateway.", registry=self.registry)
        self.joins = Counter("bc_gateway_joins_total", "Nodes joined through this gateway.", registry=self.registry)
        self.messages = Counter("bc_gateway_messages_total", "Node protocol messages, by direction and type.",
                                ["direction", "type"], registry=self.registry)
        self.errors = Counter("bc_gateway_errors_total", "Error messages sent to nodes, by code.", ["code"],
                              registry=self.registry)
        self.heartbeat_statements = Counter("bc_gateway_heartbeat_statements_total",
                                            "node_api.heartbeats calls (one per interval for all sessions).",
                                            registry=self.registry)
        self.heartbeat_sessions = Counter("bc_gateway_heartbeat_sessions_total",
                                          "Sessions written by those calls.", registry=self.registry)
        self.poll_statements = Counter("bc_gateway_poll_statements_total",
                                       "node_api.push_due calls (one per poll interval for all sessions).",
                                       registry=self.registry)
        self.fenced = Counter("bc_gateway_fenced_total", "Sessions closed as FENCED (close code 4001).",
                              registry=self.registry)

    def message(self, direction: str, kind: str) -> None:
        self.messages.labels(direction, kind if kind in TYPES else UNKNOWN).inc()

    def error(self, code: str) -> None:
        self.errors.labels(code if code in code_statuses() else OTHER).inc()
