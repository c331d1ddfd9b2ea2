"""One lock order for a node's rows: a layout change (ops.device_set_layout) racing a node's
inventory report (compute.node_register) never deadlocks. Real concurrent sessions drive the real
functions; a third session holds the node's spec row so that each reaches its contested lock in
the order that deadlocked before: the inventory report queued first on node_specs, the layout
change holding the GPU behind it."""

from __future__ import annotations

import threading
import time

import psycopg
from psycopg.types.json import Jsonb

from fleet import WHOLE, device_id, h200_inventory, make_pool

MIG = "mig:3g.71gb@0,3g.71gb@4"


def wait_for_lock(watcher: psycopg.Connection, pid: int) -> None:
    """Until session `pid` waits on a lock (its call is in flight, blocked)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if watcher.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"session {pid} never waited on a lock")


class Call(threading.Thread):
    """One statement in its own autocommit session; keeps the SQLSTATE it failed with, if any."""

    def __init__(self, dsn: str, statement: str, args: tuple[object, ...]):
        super().__init__()
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.statement, self.args = statement, args
        self.failure: str | None = None

    def run(self) -> None:
        try:
            self.conn.execute(self.statement, self.args)
        except psycopg.Error as error:
            self.failure = f"{error.sqlstate}: {error}"
        finally:
            self.conn.close()


def test_a_layout_change_and_an_inventory_report_of_one_node_never_deadlock(db: psycopg.Connection, db_dsn: str) -> None:
    pool_id = make_pool(db, [[WHOLE, WHOLE]])
    db.commit()
    node_id, name = db.execute("SELECT node_id, name FROM compute.nodes WHERE pool_id = %s", (pool_id,)).fetchone()
    gpu = db.execute("SELECT uuid FROM compute.devices WHERE device_id = %s", (device_id(db, pool_id, 1, 0),)).fetchone()[0]
    db.commit()

    with psycopg.connect(db_dsn) as gate, psycopg.connect(db_dsn, autocommit=True) as watcher:
        gate.execute("SELECT 1 FROM compute.node_specs WHERE node_id = %s FOR UPDATE", (node_id,))
        report = Call(db_dsn, "SELECT compute.node_register(%s, %s, %s)", (pool_id, name, Jsonb(h200_inventory(name, 2))))
        layout = Call(db_dsn, "SELECT ops.device_set_layout(%s, %s)", (gpu, MIG))
        for call in (report, layout):
            call.start()
            wait_for_lock(watcher, call.pid)
        gate.commit()
        for call in (report, layout):
            call.join(timeout=30)

    assert report.failure is None, report.failure
    assert layout.failure is None, layout.failure
    assert db.execute("SELECT layout FROM compute.devices WHERE uuid = %s", (gpu,)).fetchone()[0] == MIG
