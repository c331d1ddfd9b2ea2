"""A failover under load, for the failover test (tests/test_failover.py) and `make bench-ha` (bench/ha.py).

An HA set (better_compute.ha: etcd, a primary and a synchronous standby under Patroni, on 127.0.0.1)
is migrated on its leader; `serve all` (relay, gateway, worker) connects with the multi-host DSN.
Through the HTTP relay, clients reserve and release GPUs, one creates webhooks pointing at a local
receiver, and one watches the event stream. Meanwhile: a planned switchover (Patroni's REST API),
then `kill -9` of the primary's postmaster, and Patroni promotes the synchronous standby.

Every client sends each mutation with an idempotency key and sends it again, with the same key,
while the answer is 503 UNAVAILABLE; an answer of success is *acknowledged*. The watcher reconnects
with Last-Event-ID after its stream ends. `run()` returns what happened; the test checks it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg

from better_compute import ha, migrate
from fleet import H200_MODEL, WHOLE, register_nodes
from relay_support import Relay, headers
from test_serve_all import TENANT, TOKEN, serving_all
from worker_support import Receiver, wait_until

RESERVING_CLIENTS = 4
WEBHOOKS = 3
WEBHOOK_EVENTS = "reservation.released"  # one event of the four each reservation makes: fewer deliveries to wait for
PHASE_SECONDS = 3.0  # load before the switchover, between it and the kill, and after the failover
RETRY_CAP_SECONDS = 0.25  # clients retry sooner than Retry-After asks, so the failover time is measured finely
SETTLE_SECONDS = 60.0  # for the stream and the webhooks to catch up after the load
GPUS = (4, 4)  # two nodes: more GPUs than clients hold at once, so no request meets a full pool


@dataclass(frozen=True)
class Answer:
    method: str
    request: dict[str, Any]
    data: Any
    sent: float  # time.monotonic() when the attempt that succeeded was sent
    at: float  # ... and when its answer came


@dataclass
class Tally:
    """What every client saw, shared between threads."""

    acknowledged: list[Answer] = field(default_factory=list)
    unavailable: int = 0
    unavailable_without_retry_after: int = 0
    refused: list[tuple[str, int, str]] = field(default_factory=list)  # anything else: (method, status, body)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent_after(self, moment: float) -> list[Answer]:
        """Acknowledged requests whose answering attempt was sent after `moment`."""
        with self.lock:
            return [answer for answer in self.acknowledged if answer.sent > moment]

    def outage(self, start: float, end: float) -> tuple[float, float]:
        """The longest time in [start, end] without an acknowledgement, and when it ended (the first
        acknowledgement after it)."""
        with self.lock:
            moments = sorted(answer.at for answer in self.acknowledged if start <= answer.at <= end)
        return max((later - earlier, later) for earlier, later in zip([start, *moments], [*moments, end]))


@dataclass
class Outcome:
    ha: ha.HaSet
    dsn: str
    tally: Tally
    events_seen: list[str]
    receiver: Receiver
    webhook_ids: list[str]
    switchover_pause: float  # the longest time without an acknowledged write from the switchover on
    failover_seconds: float  # kill -9 -> the first acknowledged write after the outage it caused
    failover_pause: float  # the outage: the longest time without an acknowledged write from the kill on
    killed: str
    promoted: str
    replayed: tuple[Any, Any]  # (original answer, answer to the same request sent again after the failover)
    log: Callable[[], str]  # serve all's so far (the relay's, the gateway's and the worker's)


class Client:
    """One client of the relay: mutations retried with their idempotency key while 503."""

    def __init__(self, url: str, tally: Tally, stop: threading.Event):
        self.http = httpx.Client(base_url=url, timeout=30, headers=headers(TOKEN, TENANT))
        self.tally = tally
        self.stop = stop

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, request: dict[str, Any]) -> Any:
        """The data of an acknowledged answer; None when a refusal other than 503 came (tallied)."""
        while True:
            sent = time.monotonic()
            response = self.http.post("/api/compute/" + method.replace(".", "/", 1), json=request)
            if response.status_code == 200:
                answer = Answer(method, request, response.json()["data"], sent, time.monotonic())
                with self.tally.lock:
                    self.tally.acknowledged.append(answer)
                return answer.data
            if response.status_code != 503:
                with self.tally.lock:
                    self.tally.refused.append((method, response.status_code, response.text))
                return None
            retry_after = response.headers.get("retry-after")
            with self.tally.lock:
                self.tally.unavailable += 1
                self.tally.unavailable_without_retry_after += retry_after is None
            time.sleep(min(float(retry_after or 1), RETRY_CAP_SECONDS))


def keyed(request: dict[str, Any]) -> dict[str, Any]:
    return request | {"idempotency_key": str(uuid.uuid4())}


def reserve_and_release(client: Client, pool_id: str) -> None:
    while not client.stop.is_set():
        end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        created = client.call("reservations.create", keyed({"pool_id": pool_id, "shape": "gpu", "count": 1, "end": end}))
        if created is not None:
            client.call("reservations.release", keyed({"reservation_id": created["reservation_id"]}))


def create_webhooks(client: Client, url: str, made: list[str]) -> None:
    while len(made) < WEBHOOKS and not client.stop.wait(PHASE_SECONDS / 2):
        created = client.call("webhooks.create", keyed({"url": url, "secret": uuid.uuid4().hex,
                                                        "event_types": [WEBHOOK_EVENTS]}))
        if created is not None:
            made.append(created["webhook_id"])


def watch(url: str, seen: list[str], stop: threading.Event) -> None:
    """Follow the event stream; after it ends (or is refused), connect again from the last id seen."""
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=5)) as http:
        while not stop.is_set():
            extra = {"Last-Event-ID": seen[-1]} if seen else {}
            try:
                with http.stream("GET", "/api/compute/watch", headers=headers(TOKEN, TENANT) | extra) as response:
                    if response.status_code != 200:
                        time.sleep(RETRY_CAP_SECONDS)
                        continue
                    for line in response.iter_lines():
                        if line.startswith("id: "):
                            seen.append(line[4:])
                        if stop.is_set():
                            return
            except httpx.HTTPError:
                time.sleep(RETRY_CAP_SECONDS)


def tenant_events(dsn: str) -> list[str]:
    """Every event id of the tenant, in the order api.events answers them (the stream's order)."""
    ids: list[str] = []
    cursor = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            page = conn.execute("SELECT api.events(%s, %s, 500)", (TENANT, cursor)).fetchone()[0]
            ids += [event["id"] for event in page["events"]]
            if not page["events"]:
                return ids
            cursor = page["next"]


@contextmanager
def threads(*targets: Callable[[], None]) -> Iterator[None]:
    running = [threading.Thread(target=target, daemon=True) for target in targets]
    for thread in running:
        thread.start()
    try:
        yield
    finally:
        for thread in running:
            thread.join(30)


@dataclass(frozen=True)
class Disruption:
    switchover_pause: float
    failover_seconds: float
    failover_pause: float
    killed: str
    before_kill: Answer  # a reservation acknowledged before the kill, to send again after it


def disrupt(ha_set: ha.HaSet, tally: Tally) -> Disruption:
    """Under the clients' load: a planned switchover, then kill -9 of the primary's postmaster."""
    time.sleep(PHASE_SECONDS)
    asked = time.monotonic()
    ha_set.switchover()
    ha_set.wait_until(ha_set.healthy, 60, "the old primary back as synchronous standby")
    time.sleep(PHASE_SECONDS)
    switchover, _ = tally.outage(asked, time.monotonic())
    before_kill = next(answer for answer in tally.acknowledged if answer.method == "reservations.create")
    killed_at = time.monotonic()
    killed = ha_set.kill_primary()
    # A request sent just after the kill may still be acknowledged by the dying primary (its standby
    # had the commit): wait for writes on the new one before measuring the outage.
    ha_set.wait_until(lambda: ha_set.leader() not in (None, killed), 60, "the standby promoted")
    promoted_at = time.monotonic()
    wait_until(lambda: tally.sent_after(promoted_at), 60, "a write on the new primary", interval=0.05)
    time.sleep(PHASE_SECONDS)
    failover_pause, resumed = tally.outage(killed_at, time.monotonic())
    return Disruption(switchover, resumed - killed_at, failover_pause, killed, before_kill)


def make_pool(relay: Relay, dsn: str) -> str:
    """Through the relay: a site, an H200 pool offering whole GPUs; its nodes registered in SQL."""
    site = relay.data("sites.create", {"name": "ha"}, TOKEN, TENANT)
    pool_id = str(relay.data("pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL},
                             TOKEN, TENANT)["pool_id"])
    with psycopg.connect(dsn) as conn:
        register_nodes(conn, pool_id, [[WHOLE] * gpus for gpus in GPUS])
    relay.data("offerings.create", {"pool_id": pool_id, "shape": "gpu", "max_count": 1, "max_duration_seconds": 86400},
               TOKEN, TENANT)
    return pool_id


def run(base: Path, work: Path, check: Callable[[Outcome], None]) -> None:
    """The whole scenario; `check` looks at what happened while the set still runs."""
    with ha.throwaway(base) as ha_set, Receiver() as receiver:
        ha_set.ensure_database()
        dsn = ha_set.conninfo()
        migrate.migrate(dsn)
        with serving_all(dsn, work, ["--webhooks-to-private-addresses"]) as plane:
            url = plane.relay.url
            pool_id = make_pool(plane.relay, dsn)
            tally, stop, watched, seen, webhook_ids = Tally(), threading.Event(), threading.Event(), [], []
            clients = [Client(url, tally, stop) for _ in range(RESERVING_CLIENTS + 1)]
            load = [lambda c=c: reserve_and_release(c, pool_id) for c in clients[1:]]
            with threads(lambda: watch(url, seen, watched)):
                try:
                    with threads(lambda: create_webhooks(clients[0], receiver.url, webhook_ids), *load):
                        try:
                            disruption = disrupt(ha_set, tally)
                        finally:
                            stop.set()
                    clients.append(Client(url, Tally(), threading.Event()))
                    replayed = clients[-1].call(disruption.before_kill.method, disruption.before_kill.request)
                    expected = tenant_events(dsn)
                    wait_until(lambda: seen[-1:] == expected[-1:], SETTLE_SECONDS, "the event stream to catch up")
                finally:
                    watched.set()
                    for client in clients:
                        client.close()
            check(Outcome(ha_set, dsn, tally, list(seen), receiver, webhook_ids, disruption.switchover_pause,
                          disruption.failover_seconds, disruption.failover_pause, disruption.killed,
                          ha_set.leader() or "none", (disruption.before_kill.data, replayed), plane.relay.log))


def lost(dsn: str, tally: Tally) -> list[Answer]:
    """The acknowledged answers the (new) primary does not have: a reservation created or released,
    a webhook created."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        states = dict(conn.execute("SELECT reservation_id::text, state FROM compute.reservations").fetchall())
        webhooks = {row[0] for row in conn.execute("SELECT webhook_id::text FROM compute.webhooks")}

    def kept(answer: Answer) -> bool:
        if answer.method == "reservations.create":
            return answer.data["reservation_id"] in states
        if answer.method == "reservations.release":
            return states.get(answer.request["reservation_id"]) == "released"
        return answer.data["webhook_id"] in webhooks

    return [answer for answer in tally.acknowledged if not kept(answer)]


def deliveries(dsn: str, webhook_ids: list[str]) -> dict[str, str]:
    """delivery id -> state, of the webhooks' deliveries."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT delivery_id::text, state FROM compute.webhook_deliveries WHERE webhook_id = ANY (%s::uuid[])",
                            (webhook_ids,)).fetchall()
    return dict(rows)


FANNED_OUT = """
    SELECT coalesce((SELECT (c.xid, c.event_id) >= (o.xid, o.event_id)
                       FROM compute.outbox_cursors AS c,
                            (SELECT xid, event_id FROM compute.outbox ORDER BY xid DESC, event_id DESC LIMIT 1) AS o
                      WHERE c.consumer = 'webhooks'), true)"""


def deliveries_settled(dsn: str, webhook_ids: list[str]) -> bool:
    """Every event fanned out to the webhooks, and every delivery delivered."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        fanned_out = conn.execute(FANNED_OUT).fetchone()[0]
    return fanned_out and set(deliveries(dsn, webhook_ids).values()) <= {"delivered"}


def received_deliveries(receiver: Receiver) -> dict[str, list[bytes]]:
    """delivery id -> the bodies that arrived under it."""
    arrived: dict[str, list[bytes]] = {}
    for request in receiver.requests():
        arrived.setdefault(request.header("x-better-compute-delivery"), []).append(request.body)
    return arrived


def summary(outcome: Outcome, lost: int) -> dict[str, Any]:
    """The figures of one run (issue 18 part 5): failover time and acknowledged requests lost."""
    counts: dict[str, int] = {}
    for answer in outcome.tally.acknowledged:
        counts[answer.method] = counts.get(answer.method, 0) + 1
    return {"switchover_write_outage_s": round(outcome.switchover_pause, 2),
            "kill_to_first_write_s": round(outcome.failover_seconds, 2),
            "kill_write_outage_s": round(outcome.failover_pause, 2),
            "acknowledged": counts, "acknowledged_lost": lost,
            "answered_503": outcome.tally.unavailable, "events_streamed": len(outcome.events_seen),
            "killed": outcome.killed, "promoted": outcome.promoted}
