"""The worker core against the real queue: handlers run, unknown kinds and failures back off, leases
are renewed and fenced, and a real `better-compute serve worker` stops gracefully on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest

from better_compute.db import ContractError, Database
from better_compute.worker.runtime import Listener, WorkItem
from worker_support import (REPO, WEBHOOK_KEYS, WORKER_ROLE, Receiver, Reply, running_worker, sealed, wait_until,
                            worker_database)

CLI = [sys.executable, "-m", "better_compute.cli.main"]


@pytest.fixture
def pg(db: psycopg.Connection) -> psycopg.Connection:
    """The test's own session (superuser), autocommit so that workers see what it writes."""
    db.autocommit = True
    return db


@pytest.fixture
def queue_only(pg: psycopg.Connection) -> psycopg.Connection:
    """No periodic kinds: only the items a test pokes are in the queue."""
    pg.execute("DELETE FROM compute.work_periodic")
    return pg


def poke(pg: psycopg.Connection, kind: str, key: str) -> int:
    return pg.execute("SELECT compute.work_poke(%s, %s)", (kind, key)).fetchone()[0]


def work(pg: psycopg.Connection, work_id: int) -> dict[str, Any]:
    row = pg.execute("""SELECT state, attempts, lease_owner, lease_epoch, last_error, run_at, updated_at,
                               run_at - compute.compute_now() AS due_in
                          FROM compute.work WHERE work_id = %s""", (work_id,)).fetchone()
    assert row is not None
    names = ("state", "attempts", "lease_owner", "lease_epoch", "last_error", "run_at", "updated_at", "due_in")
    return dict(zip(names, row, strict=True))


def test_the_worker_runs_as_bc_worker(wdb: Database) -> None:
    assert wdb.call("pg_catalog.current_setting", "role") == "bc_worker"
    assert wdb.call("worker_api.webhook_timeout_seconds") == 10
    with pytest.raises(ContractError):
        wdb.call("compute.limit", "webhook_timeout_seconds")  # schema compute is out of its reach


def test_a_call_is_its_own_transaction_in_one_round_trip(wdb: Database) -> None:
    """Pooled connections are in autocommit: a call sends its one statement, with no BEGIN before
    and no COMMIT after it (three round trips were one wake-up of the server each)."""
    with wdb.pool.connection() as conn:
        assert conn.autocommit
    with pytest.raises(ContractError):
        wdb.call("worker_api.work_poke", "Not a kind", "k")
    with wdb.pool.connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


class RecordedDatabase(Database):
    """A worker's real pool that notes the function of each call, in order."""

    def __init__(self, dsn: str):
        super().__init__(dsn, max_size=6, name="test-worker", role=WORKER_ROLE)
        self.called: list[str] = []

    def call(self, function: str, *args: Any) -> Any:
        self.called.append(function)
        return super().call(function, *args)

    def rows(self, function: str, *args: Any) -> list[dict[str, Any]]:
        self.called.append(function)
        return super().rows(function, *args)


def test_a_woken_worker_claims_before_its_housekeeping(queue_only: psycopg.Connection, db_dsn: str) -> None:
    """The item that woke the worker (a node's acknowledgement, say) is claimed by the round's first
    call; the fan-out poke an outbox event asks for comes after it."""
    done: list[str] = []
    with RecordedDatabase(db_dsn) as rdb, running_worker(rdb, {"test.echo": lambda item: done.append(item.key)},
                                                         poll_seconds=2):
        wait_until(lambda: {"worker_api.work_claim", "worker_api.work_ensure_periodic"} <= set(rdb.called), 10,
                   "the first round")
        time.sleep(0.3)
        rdb.called.clear()
        queue_only.execute("SELECT pg_notify('bc_outbox', ''), compute.work_poke('test.echo', 'k')")
        wait_until(lambda: done == ["k"], 10, "the item woken for")
    assert rdb.called[0] == "worker_api.work_claim", rdb.called


def test_handlers_run_and_items_complete(queue_only: psycopg.Connection, wdb: Database) -> None:
    seen: list[str] = []
    handlers = {"test.echo": lambda item: seen.append(item.key), "test.again": lambda _item: 60.0}
    echoes = [poke(queue_only, "test.echo", f"k{number}") for number in range(5)]
    again = poke(queue_only, "test.again", "later")
    with running_worker(wdb, handlers):
        wait_until(lambda: all(work(queue_only, work_id)["state"] == "done" for work_id in echoes), 10, "echo items done")
        wait_until(lambda: work(queue_only, again)["attempts"] == 0 and work(queue_only, again)["state"] == "pending",
                   10, "the again item rescheduled")
    assert sorted(seen) == [f"k{number}" for number in range(5)]
    rescheduled = work(queue_only, again)
    assert rescheduled["due_in"].total_seconds() > 50 and rescheduled["last_error"] is None


def test_unknown_kind_fails_unsupported_and_backs_off(queue_only: psycopg.Connection, wdb: Database) -> None:
    work_id = poke(queue_only, "test.nobody_handles_this", "k")
    with running_worker(wdb, {}):
        wait_until(lambda: work(queue_only, work_id)["last_error"] is not None, 10, "the unknown kind failed")
    failed = work(queue_only, work_id)
    assert failed["last_error"].startswith("UNSUPPORTED")
    assert failed["state"] == "pending" and failed["run_at"] > failed["updated_at"]  # backing off, not spinning


def test_failing_handler_backs_off_then_succeeds(queue_only: psycopg.Connection, wdb: Database) -> None:
    calls: list[float] = []

    def flaky(_item: WorkItem) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("boom")

    work_id = poke(queue_only, "test.flaky", "k")
    with running_worker(wdb, {"test.flaky": flaky}):
        wait_until(lambda: work(queue_only, work_id)["last_error"] is not None, 10, "the first attempt failed")
        failed = work(queue_only, work_id)
        assert "RuntimeError: boom" in failed["last_error"] and failed["run_at"] > failed["updated_at"]
        wait_until(lambda: work(queue_only, work_id)["state"] == "done", 10, "the retry succeeded")
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.4  # work_backoff_base_seconds = 1, jitter 50-100 %


def test_lease_renewal_keeps_a_slow_item_from_a_second_worker(queue_only: psycopg.Connection, db_dsn: str) -> None:
    runs: list[int] = []

    def slow(item: WorkItem) -> None:
        runs.append(item.lease_epoch)
        time.sleep(3)

    work_id = poke(queue_only, "test.slow", "k")
    with worker_database(db_dsn) as first, worker_database(db_dsn) as second, \
            running_worker(first, {"test.slow": slow}, owner="first", lease_seconds=1), \
            running_worker(second, {"test.slow": slow}, owner="second", lease_seconds=1):
        wait_until(lambda: work(queue_only, work_id)["state"] == "done", 15, "the slow item done")
    assert len(runs) == 1, runs  # a 1 s lease outlived a 3 s handler: renewed, never claimed again
    assert work(queue_only, work_id)["lease_epoch"] == 1


def test_a_fenced_result_is_dropped_and_the_worker_goes_on(queue_only: psycopg.Connection, wdb: Database,
                                                          db_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    def taken_over(item: WorkItem) -> None:
        with psycopg.connect(db_dsn) as thief, thief.transaction():  # our lease expires; another worker claims it
            thief.execute("UPDATE compute.work SET lease_expires_at = compute.compute_now() - interval '1 second' "
                          "WHERE work_id = %s", (item.work_id,))
            thief.execute("SELECT * FROM worker_api.work_claim('thief', 1, 60, ARRAY['test.taken_over'])")

    taken = poke(queue_only, "test.taken_over", "k")
    with caplog.at_level(logging.WARNING), running_worker(wdb, {"test.taken_over": taken_over, "test.echo": lambda _: None}):
        wait_until(lambda: "result dropped" in caplog.text, 10, "the fenced result dropped")
        after = poke(queue_only, "test.echo", "after")
        wait_until(lambda: work(queue_only, after)["state"] == "done", 10, "the next item done")
    stolen = work(queue_only, taken)
    assert (stolen["state"], stolen["lease_owner"], stolen["lease_epoch"]) == ("running", "thief", 2)


def serve_worker(dsn: str, grace_seconds: float) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(REPO / "py")}
    return subprocess.Popen([*CLI, "serve", "worker", "--dsn", dsn, "--owner", "sigterm-test", "--poll-seconds", "0.2",
                             "--lease-seconds", "5", "--grace-seconds", str(grace_seconds),
                             "--webhook-key", str(WEBHOOK_KEYS.current_path),
                             "--webhooks-to-private-addresses"],  # the receiver listens on 127.0.0.1
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def slow_delivery(pg: psycopg.Connection, url: str) -> None:
    """One event for a webhook whose endpoint answers slowly, and fast webhook retries."""
    pg.execute("UPDATE compute.limits SET value = 1 WHERE name = 'webhook_backoff_base_seconds'")
    tenant = "00000000-0000-0000-0000-0000000000aa"
    pg.execute("SELECT compute.webhook_create(%s, %s, %s)", (tenant, url, sealed(pg, "s" * 32)))
    pg.execute("SELECT compute.outbox_emit(%s, 'reservation', 'r1', 'reservation.created', '{}')", (tenant,))


def delivery_state(pg: psycopg.Connection) -> str:
    return pg.execute("SELECT state FROM compute.webhook_deliveries").fetchone()[0]


def stop_with_sigterm(process: subprocess.Popen[str], timeout: float) -> tuple[int, float, str]:
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"the worker did not stop within {timeout} s:\n{output}") from None
    return process.returncode, time.monotonic() - sent, output


def test_sigterm_lets_the_running_handler_finish_then_exits_cleanly(pg: psycopg.Connection, db_dsn: str) -> None:
    with Receiver(lambda _request, _earlier: Reply(delay=1.5)) as receiver:
        slow_delivery(pg, receiver.url)
        process = serve_worker(db_dsn, grace_seconds=10)
        wait_until(lambda: receiver.requests() or process.poll() is not None, 15, "the delivery to start")
        returncode, took, output = stop_with_sigterm(process, timeout=10)
    assert returncode == 0, output
    assert 1.0 <= took < 10, output  # it waited for the handler, not for the grace period
    assert delivery_state(pg) == "delivered"
    assert "Traceback" not in output, output


def test_sigterm_gives_up_after_the_grace_period_and_the_lease_is_left_to_expire(pg: psycopg.Connection,
                                                                                 db_dsn: str) -> None:
    with Receiver(lambda _request, _earlier: Reply(delay=4)) as receiver:
        slow_delivery(pg, receiver.url)
        process = serve_worker(db_dsn, grace_seconds=0.5)
        wait_until(lambda: receiver.requests() or process.poll() is not None, 15, "the delivery to start")
        returncode, took, output = stop_with_sigterm(process, timeout=5)
    assert returncode == 0, output
    assert took < 3, output
    assert "grace period over with 1 item(s) still running" in output
    running = pg.execute("SELECT state, lease_owner FROM compute.work WHERE kind = 'webhook.deliver'").fetchone()
    assert running == ("running", "sigterm-test")  # another worker claims it once the lease expires
    assert delivery_state(pg) == "pending"


def test_a_notification_wakes_the_worker_again_a_moment_later(pg: psycopg.Connection, wdb: Database) -> None:
    """One committing writer at a time notifies (compute.wake_at_commit); those that skipped may finish just after it, so
    a notification wakes the worker at once and once more without another notification or a poll."""
    listener = Listener(wdb, threading.Event(), poll_seconds=30)
    listener.start()
    try:
        time.sleep(0.5)  # LISTEN is in place
        pg.execute("SELECT pg_notify('bc_work', '')")
        assert listener.wake.wait(10)
        listener.wake.clear()
        assert listener.wake.wait(10), "no second wake-up"
    finally:
        listener.stopping.set()
