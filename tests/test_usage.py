"""Usage export: GPU-seconds per closed hour equal the booked time (MIG counted by its fraction,
a released reservation by its truncated window), each window reaches the ledger once, and the
Better IAM ledger adapter records through the route Better IAM serves (tests/iam_server.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from better_compute.db import Database
from better_compute.ports.ledger import BetterIamLedger, LedgerEntry, LedgerError, LocalLedger
from better_compute.worker.handlers import export_usage, usage_entry
from better_compute.worker.runtime import WorkItem
from gateway_support import running_worker_process
from iam_server import IamServer, TokenPolicy
from worker_support import running_worker, standard_handlers, wait_until, worker_database

H200_INVENTORY = Path(__file__).parent / "fixtures" / "nvidia-h200" / "inventory.json"
MIG_LAYOUT = "mig:3g.71gb@0,3g.71gb@4"  # two 3g.71gb instances: 4 of 8 memory slices each
T0 = datetime(2030, 6, 30, 22, 0, tzinfo=timezone.utc)  # two hours before the month ends
EXPORTED_AT = T0 + timedelta(hours=4)  # every booking below has ended and its hours have closed
JUNE = (datetime(2030, 6, 1, tzinfo=timezone.utc), datetime(2030, 7, 1, tzinfo=timezone.utc))
EXPORT_ITEM = WorkItem(0, "usage.export", "periodic", {}, 1, 1)  # the export handler does not read its item


@pytest.fixture
def pg(db: psycopg.Connection) -> psycopg.Connection:
    """The test's own session, autocommit, its clock pinned at T0."""
    db.autocommit = True
    db.execute("SELECT compute.clock_pin(%s)", (T0,))
    return db


@pytest.fixture
def wdb(db_dsn: str) -> Iterator[Database]:
    """The worker's sessions, their clock pinned at EXPORTED_AT (every session gets it at connect)."""
    with worker_database(make_conninfo(db_dsn, options=f"-c bc.now={EXPORTED_AT.isoformat()}")) as database:
        yield database


def pool_of_four_gpus(pg: psycopg.Connection) -> uuid.UUID:
    """One node of four copies of the captured H200; the fourth split into two 3g.71gb instances."""
    captured = json.loads(H200_INVENTORY.read_text())
    name = uuid.uuid4().hex[:8]
    devices = [captured["devices"][0] | {"uuid": f"GPU-{uuid.uuid4()}", "index": index, "device_nodes": [f"/dev/nvidia{index}"],
                                         "pci_bus_id": f"00000000:{16 + index:x}:00.0"}
               for index in range(4)]
    site_id = pg.execute("SELECT compute.site_create(%s)", (f"site-{name}",)).fetchone()[0]
    pool_id = pg.execute("SELECT compute.pool_create(%s, %s, 'NVIDIA H200')", (site_id, f"pool-{name}")).fetchone()[0]
    node_id = pg.execute("SELECT compute.node_register(%s, %s, %s)",
                         (pool_id, f"node-{name}", Jsonb(captured | {"hostname": f"node-{name}", "devices": devices}))).fetchone()[0]
    pg.execute("SELECT compute.device_set_layout(device_id, %s) FROM compute.devices WHERE node_id = %s AND index = 3",
               (MIG_LAYOUT, node_id))
    for shape in ("gpu", "mig:3g.71gb"):
        pg.execute("SELECT compute.offering_create(%s, %s, 8, interval '30 days')", (pool_id, shape))
    return pool_id


def reserve(pg: psycopg.Connection, pool_id: uuid.UUID, shape: str, count: int, start: timedelta, end: timedelta,
            hold_seconds: int | None = None) -> uuid.UUID:
    request = {"tenant_id": "00000000-0000-0000-0000-00000000beef", "pool_id": str(pool_id), "shape": shape, "count": count,
               "start": (T0 + start).isoformat(), "end": (T0 + end).isoformat(), "hold_seconds": hold_seconds}
    reservation_id = pg.execute("SELECT compute.reserve(%s) ->> 'reservation_id'", (Jsonb(request),)).fetchone()[0]
    pg.execute("SELECT compute.reservation_activate(%s)", (reservation_id,))
    return uuid.UUID(reservation_id)


def book_the_fleet(pg: psycopg.Connection) -> dict[uuid.UUID, tuple[Decimal, datetime, datetime]]:
    """Three reservations; returns what each held, computed here and not by the database:
    GPU fraction times atoms, and the window it held them for."""
    pool_id = pool_of_four_gpus(pg)
    hour = timedelta(hours=1)
    two_gpus = reserve(pg, pool_id, "gpu", 2, timedelta(0), 2 * hour)
    released = reserve(pg, pool_id, "gpu", 1, hour / 2, 3 * hour)
    mig = reserve(pg, pool_id, "mig:3g.71gb", 1, timedelta(0), 2.5 * hour)  # into July
    pg.execute("SELECT compute.clock_pin(%s)", (T0 + 1.25 * hour,))
    pg.execute("SELECT compute.reservation_release(%s)", (released,))
    return {two_gpus: (Decimal(2), T0, T0 + 2 * hour),
            released: (Decimal(1), T0 + hour / 2, T0 + 1.25 * hour),
            mig: (Decimal("0.5"), T0, T0 + 2.5 * hour)}


def expected_windows(held: dict[uuid.UUID, tuple[Decimal, datetime, datetime]]) -> dict[tuple[uuid.UUID, datetime], Decimal]:
    """GPU-seconds per reservation per hour, split by hand."""
    windows: dict[tuple[uuid.UUID, datetime], Decimal] = {}
    for reservation_id, (gpus, start, end) in held.items():
        hour = start.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            overlap = min(end, hour + timedelta(hours=1)) - max(start, hour)
            windows[(reservation_id, hour)] = gpus * Decimal(int(overlap.total_seconds()))
            hour += timedelta(hours=1)
    return windows


def gpu_seconds_between(held: dict[uuid.UUID, tuple[Decimal, datetime, datetime]], since: datetime, until: datetime) -> Decimal:
    return sum((gpus * Decimal(int((min(end, until) - max(start, since)).total_seconds()))
                for gpus, start, end in held.values() if start < until and end > since), Decimal(0))


def exported_windows(pg: psycopg.Connection) -> dict[tuple[uuid.UUID, datetime], Decimal]:
    rows = pg.execute("SELECT reservation_id, window_start, gpu_seconds FROM ops.usage WHERE sent_at IS NOT NULL").fetchall()
    return {(reservation_id, window_start): gpu_seconds for reservation_id, window_start, gpu_seconds in rows}


def ledger_rows(pg: psycopg.Connection) -> dict[str, Decimal]:
    return dict(pg.execute("SELECT idempotency_key, quantity FROM compute.ledger_entries").fetchall())


def unsent(pg: psycopg.Connection) -> int:
    return pg.execute("SELECT count(*) FROM compute.usage_windows WHERE sent_at IS NULL").fetchone()[0]


class CountingLedger:
    """The local ledger, counting what it is sent; fails after `fail_after` entries when told."""

    def __init__(self, ledger: LocalLedger, fail_after: int | None = None):
        self.ledger = ledger
        self.fail_after = fail_after
        self.sent: list[str] = []

    def record(self, entry: LedgerEntry) -> None:
        if self.fail_after is not None and len(self.sent) == self.fail_after:
            raise LedgerError("UNAVAILABLE", "the ledger went away")
        self.ledger.record(entry)
        self.sent.append(entry.idempotency_key)


def test_gpu_seconds_of_a_month_equal_the_booked_time(pg: psycopg.Connection, wdb: Database) -> None:
    held = book_the_fleet(pg)
    with running_worker(wdb, standard_handlers(wdb)):
        wait_until(lambda: len(exported_windows(pg)) == len(expected_windows(held)), 15, "every window exported")
    windows = exported_windows(pg)
    assert windows == expected_windows(held)
    june = sum(seconds for (_, hour), seconds in windows.items() if JUNE[0] <= hour < JUNE[1])
    assert june == gpu_seconds_between(held, *JUNE) == Decimal(2 * 7200 + 2700 + 3600)
    ledger = ledger_rows(pg)
    assert sorted(ledger.values()) == sorted(windows.values())
    assert all(key.startswith("usage:") for key in ledger)

    again = CountingLedger(LocalLedger(wdb))
    assert export_usage(wdb, again)(EXPORT_ITEM) is None  # nothing new: back to its period
    assert again.sent == [] and ledger_rows(pg) == ledger


def test_a_crash_between_sending_and_marking_bills_each_window_once(pg: psycopg.Connection, wdb: Database) -> None:
    book_the_fleet(pg)
    wdb.call("worker_api.usage_compute")
    windows = wdb.rows("worker_api.usage_unsent", None)
    for window in windows:  # sent, then the worker died before usage_mark_sent
        LocalLedger(wdb).record(usage_entry(window))
    before = ledger_rows(pg)
    assert len(before) == len(windows) and unsent(pg) == len(windows)

    resent = CountingLedger(LocalLedger(wdb))
    assert export_usage(wdb, resent)(EXPORT_ITEM) == 0.0  # it sent something: runs again at once
    assert sorted(resent.sent) == sorted(before)  # sent again, recorded once
    assert ledger_rows(pg) == before and unsent(pg) == 0


def test_a_ledger_failure_midway_keeps_what_was_sent(pg: psycopg.Connection, wdb: Database) -> None:
    book_the_fleet(pg)
    failing = CountingLedger(LocalLedger(wdb), fail_after=2)
    with pytest.raises(LedgerError):
        export_usage(wdb, failing)(EXPORT_ITEM)
    total = pg.execute("SELECT count(*) FROM compute.usage_windows").fetchone()[0]
    assert unsent(pg) == total - 2  # the two recorded are marked sent
    rest = CountingLedger(LocalLedger(wdb))
    export_usage(wdb, rest)(EXPORT_ITEM)
    assert len(rest.sent) == total - 2 and not set(rest.sent) & set(failing.sent)
    assert unsent(pg) == 0 and len(ledger_rows(pg)) == total


def test_a_lapsed_lease_is_billed_once_the_sweep_has_ended_it(pg: psycopg.Connection, wdb: Database) -> None:
    """Its lease lapsed at T0 + 10 min, in an hour closed long ago: usage waits for the expiry sweep,
    which ends it there, instead of billing the two hours it had asked for."""
    reservation_id = reserve(pg, pool_of_four_gpus(pg), "gpu", 1, timedelta(0), timedelta(hours=2), hold_seconds=600)
    assert wdb.call("worker_api.usage_compute") == 0
    assert wdb.call("worker_api.reservations_expire") == 1
    assert wdb.call("worker_api.usage_compute") == 1
    assert pg.execute("SELECT reservation_id, window_start, gpu_seconds FROM ops.usage").fetchall() == [(reservation_id, T0, 600)]


ENTRY = LedgerEntry("usage:r:2030-06-30T22:00:00+00:00", uuid.UUID(int=7), "gpu_seconds", Decimal("1800.0"),
                    {"shape": "gpu", "project_id": None}, T0)
RECORDER = "recorder-token"  # a service account's API key holding iam:billing:record


def test_better_iam_ledger_records_through_billing_record() -> None:
    """Better IAM's route (api/billing.ts `record` behind http.ts `billing/record`), its body and
    headers; the quantity a JSON number, the window's start its `occurredAt`, null attributes left out."""
    with IamServer(now=EXPORTED_AT.timestamp()) as iam:
        BetterIamLedger(iam.url, RECORDER).record(ENTRY)
        [request] = iam.requests()
        [recorded] = iam.usage()
    assert (request.method, request.path) == ("POST", "/api/iam/billing/record")
    assert request.header("Authorization") == f"Bearer {RECORDER}" and request.header("X-Better-IAM") == "1"
    assert request.body == {"tenantId": str(ENTRY.tenant_id), "meter": "gpu_seconds", "quantity": 1800,
                            "occurredAt": int(T0.timestamp() * 1000), "idempotencyKey": ENTRY.idempotency_key,
                            "tags": {"shape": "gpu"}}
    assert recorded["quantity"] == 1800 and recorded["idempotencyKey"] == ENTRY.idempotency_key


def test_better_iam_ledger_sent_twice_is_recorded_once() -> None:
    with IamServer(now=EXPORTED_AT.timestamp()) as iam:
        ledger = BetterIamLedger(iam.url, RECORDER)
        ledger.record(ENTRY)
        ledger.record(ENTRY)  # Better IAM answers the first receipt, `duplicate: true`
        assert len(iam.requests()) == 2 and len(iam.usage()) == 1


def test_windows_exported_to_better_iam_land_once_each_in_their_month(pg: psycopg.Connection, wdb: Database) -> None:
    """Every window reaches Better IAM once, in the billing period of its hour (June's last two
    hours in 2030-06 although exported in July), also when a crash between sending and marking sent
    makes the worker send them all again."""
    held = book_the_fleet(pg)
    wdb.call("worker_api.usage_compute")
    windows = wdb.rows("worker_api.usage_unsent", None)
    with IamServer(now=EXPORTED_AT.timestamp()) as iam:
        ledger = BetterIamLedger(iam.url, RECORDER)
        for window in windows:  # sent, then the worker died before usage_mark_sent
            ledger.record(usage_entry(window))
        assert export_usage(wdb, ledger)(EXPORT_ITEM) == 0.0
        recorded = iam.usage()
    assert len(iam.requests()) == 2 * len(windows) and unsent(pg) == 0
    by_key = {entry["idempotencyKey"]: entry for entry in recorded}
    assert len(by_key) == len(recorded) == len(windows)
    expected = {(reservation_id, int(hour.timestamp() * 1000)): seconds
                for (reservation_id, hour), seconds in expected_windows(held).items()}
    assert {(uuid.UUID(entry["tags"]["reservation_id"]), entry["occurredAt"]): Decimal(str(entry["quantity"]))
            for entry in recorded} == expected
    june = {key for key, entry in by_key.items() if entry["occurredAt"] < int(JUNE[1].timestamp() * 1000)}
    assert june and all(entry["tenantId"] == "00000000-0000-0000-0000-00000000beef" for entry in recorded)


def test_serve_worker_with_the_better_iam_ledger_exports_to_it(pg: psycopg.Connection, db_dsn: str,
                                                               tmp_path: Path) -> None:
    """`serve worker --ledger better-iam --ledger-url … --ledger-token …`, a real process, records
    every window in Better IAM once."""
    held = book_the_fleet(pg)
    dsn = make_conninfo(db_dsn, options=f"-c bc.now={EXPORTED_AT.isoformat()}")
    with IamServer(now=EXPORTED_AT.timestamp()) as iam, running_worker_process(
            dsn, tmp_path, ["--ledger", "better-iam", "--ledger-url", iam.url, "--ledger-token", RECORDER]):
        wait_until(lambda: len(iam.usage()) == len(expected_windows(held)) and unsent(pg) == 0, 30,
                   "every window recorded in Better IAM")
        assert {entry["idempotencyKey"] for entry in iam.usage()} == set(ledger_keys(pg))
    assert ledger_rows(pg) == {}  # nothing went to the local ledger


def ledger_keys(pg: psycopg.Connection) -> list[str]:
    return [key for (key,) in pg.execute("SELECT ledger_key FROM compute.usage_windows").fetchall()]


@pytest.mark.parametrize(("server", "code"), [
    ({"mode": "deny"}, "ACCESS_DENIED"),
    ({"mode": "policy", "policies": {RECORDER: TokenPolicy(actions=("iam:billing:record",))}, "meters": ("gpu_hours",)},
     "NOT_FOUND"),
    ({"mode": "policy", "policies": {"someone-else": TokenPolicy()}}, "UNAUTHENTICATED"),
    ({"mode": "policy", "policies": {RECORDER: TokenPolicy(tenant="00000000-0000-0000-0000-000000000001")}},
     "ACCESS_DENIED"),
    ({"now": (T0 + timedelta(days=400)).timestamp()}, "INVALID_INPUT"),  # older than Better IAM takes
    ({"mode": "error", "error_code": "INTERNAL_ERROR", "error_status": 500}, "INTERNAL_ERROR"),
    ({"mode": "garbage", "garbage_status": 502}, "INVALID_ANSWER"),
    ({"mode": "garbage", "garbage": '{"data": "not a receipt"}'}, "INVALID_ANSWER"),
])
def test_better_iam_ledger_raises_on_a_refusal(server: dict[str, Any], code: str) -> None:
    with IamServer(**({"now": EXPORTED_AT.timestamp()} | server)) as iam, pytest.raises(LedgerError) as raised:
        BetterIamLedger(iam.url, RECORDER).record(ENTRY)
    assert raised.value.code == code
    assert not iam.usage()


def test_better_iam_ledger_unreachable_is_an_error() -> None:
    with IamServer() as iam:
        base = iam.url
    with pytest.raises(LedgerError) as raised:
        BetterIamLedger(base, RECORDER, timeout=1).record(ENTRY)
    assert raised.value.code == "UNAVAILABLE"
