"""One live BMC operation per machine under 8 concurrent sessions: reconcilers racing on the same
machines issue each step once (the machine row lock, and the partial unique index behind it), and
site agents racing to claim take each operation once; results of a claim another took are FENCED."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import psycopg
from psycopg.conninfo import make_conninfo

SESSIONS = 8
MACHINES = 4
ROUNDS = 40


def make_machines(db: psycopg.Connection) -> tuple[uuid.UUID, list[uuid.UUID]]:
    site = db.execute("SELECT compute.site_create('rack-race')").fetchone()[0]
    pool = db.execute("SELECT compute.pool_create(%s, 'h200', 'NVIDIA H200')", (site,)).fetchone()[0]
    public = bytes(range(32))
    agent = db.execute("SELECT ops.site_agent_register(%s, 'agent', %s)", (site, public)).fetchone()[0]
    key_id = db.execute("SELECT key_id FROM compute.site_agents WHERE agent_id = %s", (agent,)).fetchone()[0]
    machines = []
    for n in range(MACHINES):
        machine = uuid.uuid4()
        db.execute("SELECT ops.machine_enroll(%s, %s, %s, %s, 'http://127.0.0.1:1', %s, 'http://127.0.0.1:2/i.iso', %s, %s)",
                   (machine, agent, pool, f"bm-{n}", str(uuid.uuid4()), key_id, bytes(64)))
        db.execute("SELECT ops.machine_manage(%s)", (str(machine),))
        machines.append(machine)
    db.commit()
    return agent, machines


class Session(threading.Thread):
    """Reconciles every machine and claims, ROUNDS times; answers what it claimed with a failure
    (so the machines keep needing operations) and counts what it saw."""

    def __init__(self, dsn: str, agent: uuid.UUID, machines: list[uuid.UUID], start: threading.Barrier):
        super().__init__()
        self.dsn, self.agent, self.machines, self.start_together = dsn, agent, machines, start
        self.claimed: list[int] = []
        self.fenced = 0
        self.errors: list[str] = []
        self.max_live = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.start_together.wait()
            for _ in range(ROUNDS):
                try:
                    for machine in self.machines:
                        conn.execute("SELECT worker_api.machine_reconcile(%s)", (machine,))
                        conn.execute("SELECT worker_api.bmc_op_signed(op_id, jsonb_build_object('v', 1, 'purpose', 'bmc.op', "
                                     "'body', worker_api.bmc_op_to_sign(op_id), 'sig', 'c2ln')) "
                                     "FROM compute.bmc_ops WHERE machine_id = %s AND state = 'unsigned'", (machine,))
                    self.max_live = max(self.max_live, conn.execute(
                        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM compute.bmc_ops "
                        "WHERE state IN ('unsigned', 'queued', 'running') GROUP BY machine_id) AS live").fetchone()[0])
                    for op in conn.execute("SELECT site_api.ops_claim(%s, 1)", (self.agent,)).fetchone()[0]:
                        self.claimed.append(op["op_id"])
                        conn.execute("SELECT compute.bmc_op_result(%s, %s, %s, 'unreachable', '{}', 'race')",
                                     (self.agent, op["op_id"], op["epoch"]))
                except psycopg.Error as error:
                    if error.sqlstate == "BC410":
                        self.fenced += 1
                    else:
                        self.errors.append(f"{error.sqlstate}: {error}")


def test_eight_sessions_keep_one_live_operation_per_machine(db: psycopg.Connection, db_dsn: str) -> None:
    agent, machines = make_machines(db)
    # Unreachable results are retried at once here, so the race goes on for every round.
    db.execute("UPDATE compute.limits SET value = 1 WHERE name IN ('bmc_unreachable_retry_seconds')")
    db.commit()
    start = threading.Barrier(SESSIONS)
    sessions = [Session(db_dsn, agent, machines, start) for _ in range(SESSIONS)]
    for session in sessions:
        session.start()
    for session in sessions:
        session.join(timeout=240)
    assert not any(session.is_alive() for session in sessions)

    assert [error for session in sessions for error in session.errors] == []
    assert max(session.max_live for session in sessions) == 1
    claims = Counter(op for session in sessions for op in session.claimed)
    assert claims and set(claims.values()) == {1}  # every operation was claimed by one session only
    assert db.execute("SELECT count(*) FROM compute.bmc_ops GROUP BY machine_id, epoch HAVING count(*) > 1").fetchall() == []
    assert db.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM compute.bmc_ops WHERE state IN ('unsigned', 'queued', 'running') "
                      "GROUP BY machine_id) AS live").fetchone()[0] in (None, 1)


def test_a_role_other_than_bc_site_agent_cannot_claim(db: psycopg.Connection, db_dsn: str) -> None:
    agent, _machines = make_machines(db)
    with psycopg.connect(make_conninfo(db_dsn, options="-c role=bc_worker"), autocommit=True) as worker:
        try:
            worker.execute("SELECT site_api.ops_claim(%s)", (agent,))
        except psycopg.errors.InsufficientPrivilege:
            return
    raise AssertionError("bc_worker claimed BMC operations")
