"""Prometheus metrics of the relay (docs/architecture.md §15), in a registry of its own.

Label values are bounded (docs/architecture.md §14, metric_label_values): `method` is a catalog method or one of
the relay's own endpoints, anything else is "unknown"; `status` is the HTTP status the relay sent. An event stream
lives for minutes or hours: its life is timed in bc_relay_event_stream_seconds, never in the request histogram.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from better_compute.metrics import Metrics

UNKNOWN = "unknown"
STREAM = "watch"  # the `method` label of the event stream (GET /api/compute/watch)
STREAM_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600)


class RelayMetrics(Metrics):
    def __init__(self, process: bool = True) -> None:
        super().__init__(process)
        self.requests = Counter("bc_relay_requests_total", "HTTP requests answered, by API method and status.",
                                ["method", "status"], registry=self.registry)
        self.latency = Histogram("bc_relay_request_seconds",
                                 "Time to answer a request (an event stream's life is bc_relay_event_stream_seconds).",
                                 ["method"], registry=self.registry)
        self.decisions = Counter("bc_relay_iam_decisions_total", "IAM decisions, by outcome.", ["outcome"],
                                 registry=self.registry)
        self.streams = Gauge("bc_relay_event_streams", "Open event streams (GET /api/compute/watch).",
                             registry=self.registry)
        self.event_reads = Counter("bc_relay_event_reads_total", "api.events calls of the open event streams.",
                                   registry=self.registry)
        self.stream_life = Histogram("bc_relay_event_stream_seconds", "How long event streams stayed open.",
                                     buckets=STREAM_BUCKETS, registry=self.registry)

    def decided(self, allowed: bool) -> None:
        self.decisions.labels("allow" if allowed else "deny").inc()

    def answered(self, method: str, status: int, seconds: float) -> None:
        self.requests.labels(method, str(status)).inc()
        streamed = method == STREAM and status == HTTPStatus.OK  # a refused stream is a request like any other
        (self.stream_life if streamed else self.latency.labels(method)).observe(seconds)


class MetricsMiddleware:
    """Counts and times every HTTP request (pure ASGI, so streamed answers pass through untouched)."""

    def __init__(self, app: ASGIApp, metrics: RelayMetrics, label: Callable[[str], str]):
        self.app = app
        self.metrics = metrics
        self.label = label

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the app fails before starting a response

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.answered(self.label(scope["path"]), status, time.perf_counter() - started)
