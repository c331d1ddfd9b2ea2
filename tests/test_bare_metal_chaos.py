"""SIGKILL the site agent (dialing its gateway, as it runs in production) and the worker at random
points while machines are verified and deployed, 10 times each: every machine still ends in the right state (deploy_wait), and no operation took
effect twice: each step of each state succeeded exactly once (an op taken back from a killed agent is
issued again under a new epoch; the killed agent's late answer would be FENCED)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

from bare_metal_support import Agent, agent_argv, enroll, gateway_link, image_server, register_agent, running_emulator, state
from better_compute.pki import IntentSigner
from fleet import H200_MODEL
from gateway_support import REPO, running_gateway

KILLS = 10
MACHINES = 2
SETTLE_SECONDS = 240.0


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as log_file:
        return subprocess.Popen([sys.executable, "-m", "better_compute.cli.main", "serve", *argv], stdout=subprocess.DEVNULL,
                                stderr=log_file, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "py")})


def wait_for_running(sql: psycopg.Connection, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not sql.execute("SELECT count(*) FROM compute.bmc_ops WHERE state = 'running'").fetchone()[0]:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait()


def test_killing_agent_and_worker_never_loses_a_machine_nor_repeats_an_operation(
        sql: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    rng = random.Random(os.environ.get("BC_CHAOS_SEED", "14"))
    site = sql.execute("SELECT compute.site_create('rack-chaos')").fetchone()[0]
    pool = sql.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site, H200_MODEL)).fetchone()[0]
    agent: Agent = register_agent(sql, site, tmp_path / "agent.key")
    # A killed agent's op is taken back after 8 s (not 300) so the test moves; power lands in 2 s.
    sql.execute("UPDATE compute.limits SET value = 8 WHERE name = 'bmc_op_seconds'")
    sql.execute("UPDATE compute.limits SET value = 1 WHERE name = 'bmc_unreachable_retry_seconds'")
    worker_argv = ["worker", "--dsn", db_dsn, "--owner", "chaos-worker", "--poll-seconds", "0.2", "--lease-seconds", "2",
                   "--intent-key", str(tmp_path / "intent.key"), "--audit-key", str(tmp_path / "audit.pem"),
                   "--webhook-key", str(tmp_path / "webhook.key")]
    IntentSigner(tmp_path / "intent.key").private_key  # made before the worker and the agent start
    worker_log = Path(tempfile.mkstemp(prefix="chaos-worker-", suffix=".log")[1])
    with ExitStack() as stack:
        gateway = stack.enter_context(running_gateway(db_dsn, tmp_path / "keys"))
        site_agent_argv = agent_argv(gateway_link(gateway), agent, tmp_path / "intent.key")
        image = stack.enter_context(image_server(tmp_path / "images"))
        machines = []
        for n in range(MACHINES):
            emulator = stack.enter_context(running_emulator(tmp_path / f"bmc-{n}"))
            emulator.fault(power_seconds=2)
            machines.append(enroll(sql, agent, pool, f"bm-{n}", emulator, image))
            sql.execute("SELECT ops.machine_manage(%s)", (f"bm-{n}",))
        processes = {"worker": spawn(worker_argv, worker_log), "agent": spawn(site_agent_argv, agent.log_path)}
        try:
            victims = ["worker"] * KILLS + ["agent"] * KILLS
            rng.shuffle(victims)
            for victim in victims:
                for machine in machines:
                    if state(sql, machine) == "manageable":  # an operator provides each machine once it is verified
                        sql.execute("SELECT ops.machine_provide(%s)", (str(machine),))
                    elif state(sql, machine) == "deploy_wait":  # and, for more work to interrupt, deploys it again
                        sql.execute("SELECT ops.machine_abort(%s, 'chaos'), ops.machine_retry(%s)", (str(machine), str(machine)))
                if victim == "agent":  # at a random point of a running operation
                    wait_for_running(sql)
                    time.sleep(rng.uniform(0.0, 1.5))
                else:
                    time.sleep(rng.uniform(0.3, 2.5))
                kill(processes[victim])
                processes[victim] = spawn(worker_argv if victim == "worker" else site_agent_argv,
                                          worker_log if victim == "worker" else agent.log_path)
            deadline = time.monotonic() + SETTLE_SECONDS
            while not all(state(sql, machine) == "deploy_wait" for machine in machines):
                for machine in machines:
                    if state(sql, machine) == "manageable":
                        sql.execute("SELECT ops.machine_provide(%s)", (str(machine),))
                assert time.monotonic() < deadline, (
                    sql.execute("SELECT name, state, step, last_error, live_op FROM ops.machines").fetchall(),
                    agent.log()[-3000:])
                time.sleep(0.5)
        finally:
            for process in processes.values():
                kill(process)
    worker_log.unlink(missing_ok=True)
    agent.log_path.unlink(missing_ok=True)

    assert sql.execute("SELECT count(*) FROM compute.machines WHERE state <> 'deploy_wait'").fetchone()[0] == 0
    # Each step of each pass through a state (its generation) took effect once, and no pass that
    # finished skipped one.
    repeated = sql.execute("SELECT machine_id, generation, step, count(*) FROM compute.bmc_ops WHERE state = 'succeeded' "
                           "GROUP BY 1, 2, 3 HAVING count(*) <> 1").fetchall()
    assert repeated == []
    gaps = sql.execute("SELECT machine_id, generation FROM compute.bmc_ops WHERE state = 'succeeded' GROUP BY 1, 2 "
                       "HAVING max(step) + 1 <> count(*)").fetchall()
    assert gaps == []
    outcomes = dict(sql.execute("SELECT state, count(*) FROM compute.bmc_ops GROUP BY state").fetchall())
    print(f"chaos: {KILLS} agent and {KILLS} worker kills; BMC operations by outcome: {outcomes}")
