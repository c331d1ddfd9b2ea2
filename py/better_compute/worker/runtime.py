"""The worker core (docs/architecture.md §9, P1, P3, P10, P11): claim work, run handlers, renew leases, report.

It knows no handler: a mapping kind -> Handler is passed in. One loop does everything but the
handlers: it claims up to `concurrency` items (worker_api.work_claim), starts one thread per item
(so at most `concurrency` run at once), renews each lease at a third of its length while the
handler runs, and keeps the periodic items alive (worker_api.work_ensure_periodic). A handler's
thread reports its own result under the claimed lease epoch: complete (optionally "again in N
seconds"), or fail with the error text, which backs off in the database. An item of a kind with no
handler fails as UNSUPPORTED (P11), so it backs off instead of spinning. A FENCED answer means
another worker took the item over after our lease expired: the result is dropped and logged.

Wake-ups: LISTEN bc_work (new work) and bc_outbox (new events: outbox.fan_out is poked to run
now), each notification followed by a second wake-up LOOK_AGAIN_SECONDS later (one committing
transaction at a time notifies: compute.wake_at_commit); the loop also polls every `poll_seconds`,
so a lost notification only delays (P1).

Stopping (SIGTERM/SIGINT through `run_until_signalled`): no more claims; running handlers get
`grace_seconds` to finish while their leases are still renewed; then the worker returns anyway.
The leases of items still running then simply expire and another worker claims them again (their
handlers are level-triggered, and every write they make is fenced by the lease epoch).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from better_compute.db import LOOK_AGAIN_SECONDS, ContractError, Database
from better_compute.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

CHANNELS = ("bc_work", "bc_outbox")
OUTBOX_CHANNEL = "bc_outbox"
FAN_OUT_KIND = "outbox.fan_out"
PERIODIC_KEY = "periodic"  # the key of a periodic kind's item (compute.work_ensure_periodic)
RENEWALS_PER_LEASE = 3


@dataclass(frozen=True)
class WorkItem:
    """One claimed item; `lease_epoch` fences everything written about it."""

    work_id: int
    kind: str
    key: str
    payload: dict[str, Any]
    attempts: int
    lease_epoch: int

    @classmethod
    def from_claim(cls, row: Mapping[str, Any]) -> WorkItem:
        return cls(row["work_id"], row["kind"], row["key"], row["payload"], row["attempts"], row["lease_epoch"])

    def __str__(self) -> str:
        return f"{self.kind} {self.key} (work {self.work_id}, epoch {self.lease_epoch})"


Handler = Callable[[WorkItem], float | None]
"""Does an item's work. Returns None (done; a periodic kind runs again after its period) or the
seconds after which the item runs again. Raising fails the item: it backs off and is retried."""
AT_ONCE = 0.0  # what a Handler returns to run again at once (a bounded batch left more to do)


@dataclass(frozen=True)
class WorkerSettings:
    owner: str
    concurrency: int = 8
    lease_seconds: float = 30.0
    poll_seconds: float = 1.0
    grace_seconds: float = 30.0

    @property
    def renew_every(self) -> float:
        return self.lease_seconds / RENEWALS_PER_LEASE


def default_owner() -> str:
    """host:pid: what ops.work shows as the lease owner."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Running:
    """An item whose handler runs now. `finishing`: its result is being reported, stop renewing."""

    item: WorkItem
    renew_at: float
    finishing: bool = False
    lease_lost: bool = False

    @property
    def renewable(self) -> bool:
        return not (self.finishing or self.lease_lost)


@dataclass
class Listener:
    """A thread that LISTENs on its own connection and turns notifications into wake-ups."""

    db: Database
    wake: threading.Event
    poll_seconds: float
    outbox_notified: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._listen_until_stopped, name="work-listener", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(self.poll_seconds + 1)

    def _listen_until_stopped(self) -> None:
        while not self.stopping.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("LISTEN connection lost (%s); polling until it is back", error)
                self.stopping.wait(self.poll_seconds)

    def _listen(self) -> None:
        """Each notification wakes the worker now and once more LOOK_AGAIN_SECONDS later (what
        writers that skipped the notification commit just after it)."""
        with self.db.connect() as conn:
            for channel in CHANNELS:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            again: set[str] = set()
            again_at = math.inf
            while not self.stopping.is_set():
                timeout = min(self.poll_seconds, max(0.0, again_at - time.monotonic()))
                for notification in conn.notifies(timeout=timeout, stop_after=1):
                    self._wake(notification.channel)
                    again.add(notification.channel)
                    again_at = min(again_at, time.monotonic() + LOOK_AGAIN_SECONDS)
                if time.monotonic() >= again_at:
                    for channel in again:
                        self._wake(channel)
                    again.clear()
                    again_at = math.inf

    def _wake(self, channel: str) -> None:
        if channel == OUTBOX_CHANNEL:
            self.outbox_notified.set()
        self.wake.set()


class Worker:
    def __init__(self, db: Database, handlers: Mapping[str, Handler], settings: WorkerSettings,
                 metrics: WorkerMetrics | None = None):
        self.db = db
        self.handlers = dict(handlers)
        self.settings = settings
        self.metrics = metrics or WorkerMetrics(db, self.handlers, process=False, fleet=False)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.listener = Listener(db, self.wake, settings.poll_seconds)
        self.lock = threading.Lock()
        self.running: dict[int, Running] = {}
        self.next_periodic_check = 0.0

    def stop(self) -> None:
        """Stop claiming; `run` returns once running handlers finish or the grace period ends."""
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        """Work until stopped. The first round runs unguarded, so a worker that cannot work at all
        (wrong role, a concurrency the database refuses) fails at once instead of logging forever."""
        self.listener.start()
        try:
            self.tick()
            while not self.stopping.is_set():
                self.wake.wait(self.seconds_to_wait(self.settings.poll_seconds))
                self.wake.clear()
                self.guarded(self.tick)
            self.drain()
        finally:
            self.listener.stop()

    def guarded(self, step: Callable[[], None]) -> None:
        """A round that fails (the database restarting, say) is logged; the next one tries again."""
        try:
            step()
        except Exception:
            log.exception("worker round failed; trying again in %.1f s", self.settings.poll_seconds)

    def tick(self) -> None:
        """Claim first: the item that woke us (a node's acknowledgement, say) waits for no
        housekeeping call. What housekeeping queues is claimed by the next round, at once for the
        fan-out (its poke notifies) and within poll_seconds for a periodic item just made."""
        self.claim()
        self.renew_due_leases()
        if self.listener.outbox_notified.is_set():
            self.listener.outbox_notified.clear()
            self.db.call("worker_api.work_poke", FAN_OUT_KIND, PERIODIC_KEY)
        if time.monotonic() >= self.next_periodic_check:
            if self.db.call("worker_api.work_ensure_periodic"):
                self.claim()
            self.next_periodic_check = time.monotonic() + self.settings.poll_seconds

    def claim(self) -> None:
        with self.lock:
            free = self.settings.concurrency - len(self.running)
        if free <= 0 or self.stopping.is_set():
            return
        for row in self.db.rows("worker_api.work_claim", self.settings.owner, free, self.settings.lease_seconds):
            item = WorkItem.from_claim(row)
            handler = self.handlers.get(item.kind)
            if handler is None:
                log.warning("no handler for %s: failing it as UNSUPPORTED", item)
                self.metrics.ran(item.kind, "unsupported")
                self.report(item, error=f"UNSUPPORTED: kind {item.kind!r} has no handler in this worker")
            else:
                self.start(item, handler)

    def start(self, item: WorkItem, handler: Handler) -> None:
        running = Running(item, time.monotonic() + self.settings.renew_every)
        with self.lock:
            self.running[item.work_id] = running
        threading.Thread(target=self.execute, args=(running, handler), name=f"work-{item.work_id}", daemon=True).start()

    def execute(self, running: Running, handler: Handler) -> None:
        item = running.item
        started = time.perf_counter()
        self.metrics.running.inc()
        try:
            again = handler(item)
            error = None
        except Exception as failure:
            log.warning("%s failed", item, exc_info=True)
            again, error = None, f"{type(failure).__name__}: {failure}"
        finally:
            self.metrics.running.dec()
        self.metrics.ran(item.kind, "done" if error is None else "failed", time.perf_counter() - started)
        with self.lock:
            running.finishing = True
        try:
            self.report(item, again, error)
        finally:
            with self.lock:
                # Once reported, the item may already be claimed again (it asked to run again at
                # once) and tracked under the same id by a new run: remove only our own entry.
                if self.running.get(item.work_id) is running:
                    del self.running[item.work_id]
            self.wake.set()

    def report(self, item: WorkItem, again: float | None = None, error: str | None = None) -> None:
        """Complete or fail under the claimed epoch. FENCED: the item is someone else's now, drop
        the result. Any other trouble: the result is lost, the lease expires, the item runs again."""
        try:
            if error is None:
                self.db.call("worker_api.work_complete", item.work_id, item.lease_epoch, again)
            else:
                self.db.call("worker_api.work_fail", item.work_id, item.lease_epoch, error)
        except ContractError as refused:
            if refused.code == "FENCED":
                log.warning("%s: result dropped, the item was taken over (%s)", item, refused.message)
            else:
                log.error("%s: result refused (%s); the lease expires and the item runs again", item, refused)
        except Exception:
            log.exception("%s: result not recorded; the lease expires and the item runs again", item)

    def renew_due_leases(self) -> None:
        now = time.monotonic()
        with self.lock:
            due = [running for running in self.running.values() if running.renewable and running.renew_at <= now]
        for running in due:
            running.renew_at = time.monotonic() + self.settings.renew_every
            self.renew(running)

    def renew(self, running: Running) -> None:
        try:
            self.db.call("worker_api.work_extend", running.item.work_id, running.item.lease_epoch,
                         self.settings.lease_seconds)
        except ContractError as refused:
            if refused.code != "FENCED":
                log.warning("%s: lease not renewed (%s); trying again", running.item, refused)
            elif not running.finishing:  # FENCED after our own completion is no news
                running.lease_lost = True
                log.warning("%s: lease lost (%s); its result will be dropped", running.item, refused.message)

    def seconds_to_wait(self, at_most: float) -> float:
        with self.lock:
            renewals = [running.renew_at for running in self.running.values() if running.renewable]
        return max(0.0, min([at_most, *(renew_at - time.monotonic() for renew_at in renewals)]))

    def drain(self) -> None:
        """Let running handlers finish within the grace period, renewing their leases meanwhile."""
        deadline = time.monotonic() + self.settings.grace_seconds
        while self.running and time.monotonic() < deadline:
            self.wake.wait(self.seconds_to_wait(deadline - time.monotonic()))
            self.wake.clear()
            self.guarded(self.renew_due_leases)
        with self.lock:
            left = [str(running.item) for running in self.running.values()]
        if left:
            log.warning("grace period over with %d item(s) still running (%s): their leases expire and "
                        "another worker claims them again", len(left), "; ".join(left))
        log.info("worker %s stopped", self.settings.owner)


def run_until_signalled(worker: Worker) -> None:
    """Run in the main thread; SIGTERM or SIGINT stops the worker gracefully."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: stop_on(worker, received))
    worker.run()


def stop_on(worker: Worker, signum: int) -> None:
    log.info("%s: stopping (grace %g s)", signal.Signals(signum).name, worker.settings.grace_seconds)
    worker.stop()
