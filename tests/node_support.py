"""Node daemons for tests: `bcd` as real processes (fake driver from the real H200 capture),
waiting for them, and reading back what they converged to (CDI file, observed generation)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import yaml

from better_compute.daemon.state import NodeState
from gateway_support import REPO, GatewayProcess

H200_INVENTORY = Path(__file__).parent / "fixtures" / "nvidia-h200" / "inventory.json"
BCD = Path(sys.executable).with_name("bcd")
SECONDS = 15.0  # what the daemon must do (converge, answer) happens well within this
STOP_SECONDS = 15.0


def wait_until(condition: Callable[[], Any], what: str, log: Callable[[], str] = lambda: "",
               timeout: float = SECONDS) -> Any:
    """Poll until `condition` is truthy; its value. The daemon's log is quoted when it never is."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}\n{log()[-4000:]}"
        time.sleep(0.1)
    return value


def fake_driver(hostname: str, inventory: Path = H200_INVENTORY) -> list[str]:
    return ["--driver", "fake", "--driver-option", f"path={inventory}", "--driver-option", f"hostname={hostname}"]


def bcd(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BCD), *arguments], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "py")})


@dataclass
class RunningDaemon:
    """A `bcd run` process and its log (stderr)."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_bcd(gateway: GatewayProcess, state_dir: Path, hostname: str, cdi_path: Path,
                extra: Sequence[str] = (), inventory: Path = H200_INVENTORY) -> Iterator[RunningDaemon]:
    """`bcd run` (fake driver, and `extra` options); SIGTERM, then SIGKILL, when the block ends and it
    still runs."""
    log_path = Path(tempfile.mkstemp(prefix="bcd-", suffix=".log")[1])
    with log_path.open("wb") as log_file:
        process = subprocess.Popen([str(BCD), "run", "--gateway", gateway.url, "--state-dir", str(state_dir),
                                    "--cdi-path", str(cdi_path), *fake_driver(hostname, inventory), *extra],
                                   stdout=subprocess.DEVNULL, stderr=log_file, cwd=REPO,
                                   env={**os.environ, "PYTHONPATH": str(REPO / "py")})
    try:
        yield RunningDaemon(process, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log_path.unlink(missing_ok=True)


@dataclass
class JoinedNode:
    hostname: str
    state_dir: Path
    node_id: uuid.UUID
    cdi_path: Path


def join_node(gateway: GatewayProcess, token: str, root: Path, hostname: str) -> JoinedNode:
    """`bcd join` (fake driver) with a token; the node it became. Its state and CDI file under `root`."""
    state_dir = root / hostname
    joined = bcd("join", "--gateway", gateway.url, "--token", token, "--ca-file", str(gateway.ca_path),
                 "--state-dir", str(state_dir), *fake_driver(hostname))
    assert joined.returncode == 0, joined.stderr
    node_id = NodeState(state_dir).load().node_id
    assert f"joined as node {node_id}" in joined.stdout
    return JoinedNode(hostname, state_dir, node_id, root / "cdi" / f"{hostname}.yaml")


def spec_state(sql: psycopg.Connection, node_id: uuid.UUID) -> tuple[int | None, int | None]:
    """(signed_generation, observed_generation) of the node's spec."""
    return sql.execute("SELECT signed_generation, observed_generation FROM compute.node_specs WHERE node_id = %s",
                       (node_id,)).fetchone()


def cdi_devices(node: JoinedNode) -> list[str]:
    """The device names the node's CDI file lists (none: no file)."""
    return [device["name"] for device in yaml.safe_load(node.cdi_path.read_text())["devices"]] if node.cdi_path.exists() else []


def converged(sql: psycopg.Connection, node: JoinedNode, devices: list[str]) -> bool:
    """The CDI file lists exactly `devices` and the node reported the signed generation."""
    signed, observed = spec_state(sql, node.node_id)
    return signed is not None and observed == signed and cdi_devices(node) == devices
