"""`better-compute serve all`: the relay, the gateway and the worker in one process. A `bcd` joins
it with a token made through its relay, a reservation through the relay reaches the node's CDI
file (the worker in the same process signed the spec), and SIGTERM stops all three cleanly."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from better_compute.daemon.drivers import fake
from fleet import H200_MODEL
from gateway_support import REPO
from iam_server import statement, write_static_iam
from node_support import STOP_SECONDS, converged, join_node, running_bcd, wait_until
from relay_support import LISTENING, START_SECONDS, Relay

TENANT = "dddddddd-0000-4000-8000-000000000004"
TOKEN = "token-of-the-single-machine"
CA_LINE = "ca: "


@dataclass
class AllInOne:
    relay: Relay
    url: str  # the gateway's (what node_support's helpers dial)
    ca_path: Path


@contextmanager
def serving_all(dsn: str, directory: Path, extra: Sequence[str] = ()) -> Iterator[AllInOne]:
    iam = write_static_iam(directory / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow")])])
    log_path = Path(tempfile.mkstemp(prefix="serve-all-", suffix=".log")[1])
    with log_path.open("w") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "better_compute.cli.main", "serve", "all", "--dsn", dsn, "--api-port", "0",
             "--gateway-port", "0", "--iam-file", str(iam), "--keys", str(directory / "keys"), "--heartbeat-seconds", "1",
             "--spec-poll-seconds", "1", "--grace-seconds", "5", *extra],
            stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "py")})
    relay = Relay("", process, log_path)
    try:
        lines = announced(process)
        assert {"http", "wss", "ca"} <= lines.keys(), f"serve all did not start ({lines}):\n{relay.tail()}"
        relay.url = lines["http"]
        yield AllInOne(relay, lines["wss"], Path(lines["ca"]))
    finally:
        relay.stop(STOP_SECONDS)
        log_path.unlink(missing_ok=True)


def announced(process: subprocess.Popen[str], timeout: float = START_SECONDS) -> dict[str, str]:
    """What the process printed, by kind: the relay's URL (http), the gateway's (wss), its CA path (ca).
    (Lines are read by a thread: select() cannot see lines already in the pipe's read buffer.)"""
    assert process.stdout is not None
    printed: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [printed.put(line) for line in process.stdout or ()], daemon=True).start()
    lines: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(lines) < 3 and time.monotonic() < deadline:
        try:
            line = printed.get(timeout=0.1)
        except queue.Empty:
            continue
        if line.startswith(LISTENING):
            url = line[len(LISTENING):].strip()
            lines[url.split(":", 1)[0]] = url
        elif line.startswith(CA_LINE):
            lines["ca"] = line[len(CA_LINE):].strip()
    return lines


def test_one_process_serves_the_api_the_nodes_and_the_work(db_dsn: str, sql: psycopg.Connection, tmp_path: Path) -> None:
    with serving_all(db_dsn, tmp_path) as plane:
        def call(method: str, document: dict[str, object]) -> dict[str, object]:
            return plane.relay.data(method, document, TOKEN, TENANT)

        site = call("sites.create", {"name": "one-box"})
        pool = str(call("pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL})["pool_id"])
        call("offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 1, "max_duration_seconds": 3600})
        node = join_node(plane, str(call("joinTokens.create", {"pool_id": pool})["token"]), tmp_path, "one-box-node")  # type: ignore[arg-type]
        with running_bcd(plane, node.state_dir, node.hostname, node.cdi_path) as daemon:  # type: ignore[arg-type]
            end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
            call("reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1, "end": end})
            wait_until(lambda: converged(sql, node, [fake.gpu_uuid(node.hostname, 0)]), "the booked GPU in the CDI file",
                       daemon.log)
        plane.relay.process.send_signal(signal.SIGTERM)
        assert plane.relay.process.wait(STOP_SECONDS) == 0, plane.relay.tail()
        assert "Traceback" not in plane.relay.log(), plane.relay.tail()
