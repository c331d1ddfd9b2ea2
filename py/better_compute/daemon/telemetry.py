"""GPU telemetry, kept out of the control path (P8): `bcd run --metrics-url` pushes each GPU's and MIG
device's gauges and counters to a time-series endpoint with Prometheus remote write 1.0, never through
PostgreSQL or the node session. The daemon opens no port (P5), so it pushes rather than being scraped.

Every `interval` seconds a task of its own reads the driver (`sample`, in a worker thread) and makes a
batch: one sample per series, labelled `node` (the node id), `gpu_uuid`, `mig_uuid` (absent for a whole
GPU) and `reservation` (the reservation(s) the current signed spec books the GPU or MIG device to;
absent when free). Label values come only from the node's own devices and its spec, and a batch holds
at most MAX_SERIES series (P12), so the cardinality is bounded by the node's hardware.

A batch that cannot be delivered (the endpoint unreachable, slower than PUSH_SECONDS, or answering
5xx or 429) stays in a spill buffer of at most SPILL_SAMPLES samples; when it overflows, the oldest
batch goes and `bc_telemetry_samples_dropped_total{reason="overflow"}` counts it. Batches are
resent oldest first, so each series' timestamps only grow (Prometheus refuses older samples). Any
other answer (a 4xx: the endpoint will never take that batch) drops the batch, logged once per
status, counted with reason "rejected".

Timestamps are the node's wall clock: telemetry is not business time (P9 governs the control
plane's clock, which the daemon does not have).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import cramjam
import httpx

from better_compute.daemon.drivers import InventoryDriver, InventoryError, Reading

log = logging.getLogger(__name__)

MAX_SERIES = 512  # series per batch (P12): 8 GPUs × 7 MIG devices × 7 metrics fit with room
SPILL_SAMPLES = 16_384  # samples kept while the endpoint is down; at 8 GPUs every 15 s, about an hour
PUSH_SECONDS = 10.0  # one request, connect to answer
DEFAULT_INTERVAL_SECONDS = 15.0
LABEL_VALUE_CHARS = 256  # a reservation label of many time-slice slots is cut here

# Reading field -> (metric name, labels of its own).
METRICS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "utilization_ratio": ("bc_gpu_utilization_ratio", ()),
    "memory_used_bytes": ("bc_gpu_memory_used_bytes", ()),
    "temperature_celsius": ("bc_gpu_temperature_celsius", ()),
    "power_watts": ("bc_gpu_power_watts", ()),
    "ecc_corrected": ("bc_gpu_ecc_errors_total", (("type", "corrected"),)),
    "ecc_uncorrected": ("bc_gpu_ecc_errors_total", (("type", "uncorrected"),)),
    "xid_errors": ("bc_gpu_xid_errors_total", ()),
}
DROPPED_METRIC = "bc_telemetry_samples_dropped_total"
OVERFLOW, REJECTED = "overflow", "rejected"
REASONS = (OVERFLOW, REJECTED)

HEADERS = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
           "X-Prometheus-Remote-Write-Version": "0.1.0", "User-Agent": "bcd-telemetry"}

Labels = tuple[tuple[str, str], ...]  # sorted by name, __name__ among them


@dataclass(frozen=True)
class Batch:
    """The samples of one moment (ms since the epoch, wall clock)."""

    timestamp_ms: int
    series: tuple[tuple[Labels, float], ...]


# -- what is pushed ---------------------------------------------------------------------------------

def holders(bookings: Iterable[Any]) -> dict[str, str]:
    """Which reservation(s) hold each device of a spec's bookings: the MIG uuid for a MIG booking, the
    GPU uuid for a whole GPU or time-slice slots (several reservations, comma-separated, sorted)."""
    held: dict[str, set[str]] = {}
    for booking in bookings:
        if not isinstance(booking, dict):
            continue
        device = booking.get("mig_uuid") if booking.get("kind") == "mig" else booking.get("device_uuid")
        if isinstance(device, str) and booking.get("reservation_id") is not None:
            held.setdefault(device, set()).add(str(booking["reservation_id"]))
    return {device: ",".join(sorted(reservations)) for device, reservations in held.items()}


def labels(**pairs: str | None) -> Labels:
    """Sorted labels, those without a value left out (Prometheus reads an empty label as absent)."""
    return tuple(sorted((name, value[:LABEL_VALUE_CHARS]) for name, value in pairs.items() if value))


def series(node: str, readings: Iterable[Reading], held: dict[str, str]) -> list[tuple[Labels, float]]:
    """One series per metric each reading has a value of."""
    found = []
    for reading in readings:
        holder = held.get(reading.mig_uuid if reading.mig_uuid else reading.gpu_uuid)
        for field in fields(Reading):
            value = getattr(reading, field.name)
            if field.name not in METRICS or value is None:
                continue
            name, own = METRICS[field.name]
            found.append((labels(__name__=name, node=node, gpu_uuid=reading.gpu_uuid, mig_uuid=reading.mig_uuid,
                                 reservation=holder, **dict(own)), float(value)))
    return found


# -- remote write 1.0: a protobuf WriteRequest, snappy block-compressed -----------------------------

def _varint(number: int) -> bytes:
    if number < 0:  # a timestamp before 1970: a clock this encoder does not serve
        raise ValueError(f"{number} cannot be a varint here")
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def write_request(batch: Batch) -> bytes:
    """prometheus.WriteRequest{timeseries=1: TimeSeries{labels=1: Label{name=1, value=2},
    samples=2: Sample{value=1 (double), timestamp=2 (int64)}}}."""
    body = bytearray()
    for pairs, value in batch.series:
        encoded = b"".join(_field(1, _field(1, name.encode()) + _field(2, text.encode())) for name, text in pairs)
        encoded += _field(2, _varint(1 << 3 | 1) + struct.pack("<d", value)
                          + _varint(2 << 3 | 0) + _varint(batch.timestamp_ms))
        body += _field(1, encoded)
    return bytes(body)


def compressed(batch: Batch) -> bytes:
    return bytes(cramjam.snappy.compress_raw(write_request(batch)))


def check_url(url: str) -> str:
    """A remote-write endpoint is an http(s):// URL (ValueError otherwise)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the metrics endpoint is an http(s):// URL, not {url!r:.200}")
    return url


# -- the pusher -------------------------------------------------------------------------------------

class Telemetry:
    """Samples `driver` and pushes to `url`, with the spill buffer between them."""

    def __init__(self, url: str, node: str, driver: InventoryDriver, bookings: Callable[[], Iterable[Any]],
                 interval: float = DEFAULT_INTERVAL_SECONDS, spill_samples: int = SPILL_SAMPLES,
                 push_seconds: float = PUSH_SECONDS, clock: Callable[[], float] = time.time) -> None:
        check_url(url)
        if spill_samples < MAX_SERIES + len(REASONS):
            raise ValueError(f"the spill buffer must hold one full batch ({MAX_SERIES + len(REASONS)} samples)")
        self.url, self.node, self.driver, self.bookings = url, node, driver, bookings
        self.interval, self.spill_samples, self.push_seconds, self.clock = interval, spill_samples, push_seconds, clock
        self.spill: deque[Batch] = deque()
        self.spilled = 0  # samples in self.spill
        self.dropped = dict.fromkeys(REASONS, 0)  # samples, by why
        self.sent = 0  # batches the endpoint took
        self._told: set[str] = set()  # what was logged once

    def tell_once(self, what: str, message: str, *arguments: Any) -> None:
        if what not in self._told:
            self._told.add(what)
            log.warning(message, *arguments)

    def record(self, readings: Iterable[Reading]) -> Batch:
        """A batch of `readings` now, with the drop counters, into the spill buffer (its bound kept)."""
        found = series(self.node, readings, holders(self.bookings()))
        if len(found) > MAX_SERIES:
            self.tell_once("series", "%d series read, %d pushed (MAX_SERIES)", len(found), MAX_SERIES)
            found = found[:MAX_SERIES]
        size = len(found) + len(self.dropped)
        while self.spill and self.spilled + size > self.spill_samples:  # room first: the counters then say so
            oldest = self.spill.popleft()
            self.spilled -= len(oldest.series)
            self.dropped[OVERFLOW] += len(oldest.series)
            self.tell_once("overflow", "the metrics endpoint %s has been down long enough that the spill buffer "
                           "(%d samples) drops the oldest samples", self.url, self.spill_samples)
        found += [(labels(__name__=DROPPED_METRIC, node=self.node, reason=reason), float(count))
                  for reason, count in self.dropped.items()]
        batch = Batch(int(self.clock() * 1000), tuple(found))
        self.spill.append(batch)
        self.spilled += len(batch.series)
        return batch

    async def push(self, client: httpx.AsyncClient, batch: Batch) -> bool | None:
        """True: taken; False: refused for good (drop it); None: try again later."""
        try:
            async with asyncio.timeout(self.push_seconds):
                answer = await client.post(self.url, content=compressed(batch), headers=HEADERS)
        except (httpx.HTTPError, TimeoutError) as error:
            self.tell_once("down", "the metrics endpoint %s cannot be reached (%s): spilling", self.url,
                           str(error) or type(error).__name__)
            return None
        if answer.is_success:
            self._told.discard("down")
            return True
        if answer.status_code == 429 or answer.status_code >= 500:
            self.tell_once("down", "the metrics endpoint %s answers %d: spilling", self.url, answer.status_code)
            return None
        self.tell_once(f"status {answer.status_code}", "the metrics endpoint %s refuses a batch with %d (%.300s): "
                       "dropped", self.url, answer.status_code, answer.text)
        return False

    async def flush(self, client: httpx.AsyncClient, budget: float | None = None) -> None:
        """Send the spilled batches, oldest first, until one cannot go or `budget` seconds are spent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.interval if budget is None else budget)
        while self.spill and loop.time() < deadline:
            taken = await self.push(client, self.spill[0])
            if taken is None:
                return
            batch = self.spill.popleft()
            self.spilled -= len(batch.series)
            if taken:
                self.sent += 1
            else:
                self.dropped[REJECTED] += len(batch.series)

    async def run(self) -> None:
        """Sample, spill and push every `interval` seconds until cancelled."""
        async with httpx.AsyncClient(timeout=self.push_seconds, follow_redirects=False) as client:
            while True:
                try:
                    self.record(await asyncio.to_thread(self.driver.sample))
                except InventoryError as error:
                    self.tell_once("sample", "GPU readings cannot be taken: %s", error)
                except Exception as error:  # a driver's bug must not end telemetry, nor touch the session
                    self.tell_once("bug", "GPU readings failed: %s: %s", type(error).__name__, error)
                await self.flush(client)
                await asyncio.sleep(self.interval)
