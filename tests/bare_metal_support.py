"""Bare metal for tests: a real Redfish BMC (tests/bmc_emulator.py, sushy-tools' emulator) as a
process, an HTTP server holding the "image", the site agent as a process (`serve site-agent`), and
the image's boot: when the BMC reports power on with the media inserted, a fake-driver `bcd` joins
with the token the agent put in the media URL and the machine's system uuid in its inventory."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import psycopg

from better_compute.pki import IntentSigner
from better_compute.sealing import SecretKeyring, seal
from better_compute.siteagent.cli import raw_public_key
from gateway_support import REPO, GatewayProcess
from node_support import BCD, H200_INVENTORY, SECONDS

EMULATOR = REPO / "scripts" / "bmc_emulator.py"
USERNAME = "admin"
AGENT_KEY = bytes(range(1, 33))  # a site agent's X25519 public key (raw), for tests that run no agent


def enrollment(pool_id: str, agent_id: str, name: str, agent_key: bytes = AGENT_KEY) -> dict[str, Any]:
    """machines.enroll's input: BMC credentials sealed to the agent's key with the machine id, as the CLI seals them."""
    machine_id = str(uuid.uuid4())
    box = seal(agent_key, json.dumps({"username": "root", "password": "calvin"}), aad=machine_id.encode())
    return {"machine_id": machine_id, "agent_id": agent_id, "pool_id": pool_id, "name": name, "bmc_address": "https://10.0.0.7",
            "system_uuid": str(uuid.uuid4()), "image_url": "https://images.example/bcd.iso", "credentials_key_id": box.key_id,
            "credentials_box": base64.b64encode(box.box).decode()}


@dataclass
class Emulator:
    process: subprocess.Popen[str]
    port: int
    state_dir: Path
    system_uuid: str
    password: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> dict[str, object]:
        return httpx.get(self.url + path, auth=(USERNAME, self.password), timeout=10).json()

    def fault(self, **fault: object) -> None:
        httpx.post(self.url + "/_fault", json=fault, timeout=10).raise_for_status()

    def booted_media(self) -> str | None:
        """The media URL, when the system is on and a CD is inserted (what boots the image)."""
        system = self.get(f"/redfish/v1/Systems/{self.system_uuid}")
        collection = self.get(system["VirtualMedia"]["@odata.id"])  # type: ignore[index]
        media = next(m for m in (self.get(member["@odata.id"]) for member in collection["Members"])  # type: ignore[union-attr]
                     if "CD" in m["MediaTypes"])  # type: ignore[operator]
        return str(media["Image"]) if system["PowerState"] == "On" and media.get("Inserted") else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def start_emulator(state_dir: Path, system_uuid: str, password: str, port: int = 0) -> Emulator:
    """The BMC as a process (port 0: any free one; a restarted BMC takes its old port)."""
    process = subprocess.Popen([sys.executable, str(EMULATOR), str(state_dir), system_uuid, USERNAME, password, str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert process.stdout is not None
    return Emulator(process, int(process.stdout.readline()), state_dir, system_uuid, password)


@contextmanager
def running_emulator(state_dir: Path) -> Iterator[Emulator]:
    emulator = start_emulator(state_dir, str(uuid.uuid4()), "pw-" + uuid.uuid4().hex)
    try:
        yield emulator
    finally:
        emulator.stop()


@contextmanager
def image_server(directory: Path) -> Iterator[str]:
    """The "image" (a file the BMC really fetches) over HTTP on 127.0.0.1; its URL."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bcd.iso").write_bytes(b"an image that boots bcd\n")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/bcd.iso"
    finally:
        server.shutdown()


@dataclass
class Agent:
    agent_id: uuid.UUID
    keyring: SecretKeyring
    log_path: Path
    signing_key: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def register_agent(sql: psycopg.Connection, site_id: uuid.UUID, key_path: Path, name: str = "agent-1") -> Agent:
    keyring, signing_key = SecretKeyring(key_path), key_path.with_suffix(".signing.key")
    agent_id = sql.execute("SELECT ops.site_agent_register(%s, %s, %s, %s)",
                           (site_id, name, keyring.public_key, raw_public_key(IntentSigner(signing_key)))).fetchone()[0]
    return Agent(agent_id, keyring, Path(tempfile.mkstemp(prefix="site-agent-", suffix=".log")[1]), signing_key)


def gateway_link(gateway: GatewayProcess) -> list[str]:
    """The agent dials `gateway` (its session, with its own certificate)."""
    return ["--gateway", gateway.url, "--ca-file", str(gateway.ca_path)]


def dsn_link(dsn: str) -> list[str]:
    """The fallback: the agent logs in to PostgreSQL as bc_site_agent."""
    return ["--dsn", dsn]


def agent_argv(link: list[str], agent: Agent, intent_key: Path) -> list[str]:
    """`serve site-agent` for `agent` over `link` (gateway_link or dsn_link), trusting operations
    signed by the workers' `intent_key`."""
    return ["site-agent", *link, "--agent-id", str(agent.agent_id), "--key", str(agent.keyring.current_path),
            "--signing-key", str(agent.signing_key), "--intent-key", str(intent_key)]


@contextmanager
def running_agent(link: list[str], agent: Agent, intent_key: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`better-compute serve site-agent` as a process (log appended to agent.log_path); SIGKILL on exit."""
    with agent.log_path.open("ab") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "better_compute.cli.main", "serve", *agent_argv(link, agent, intent_key)],
                                   stdout=subprocess.DEVNULL, stderr=log_file, cwd=REPO,
                                   env={**os.environ, "PYTHONPATH": str(REPO / "py")})
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()


def enroll(sql: psycopg.Connection, agent: Agent, pool_id: uuid.UUID, name: str, emulator: Emulator, image_url: str) -> uuid.UUID:
    """Enroll a machine as the CLI would: its credentials sealed on this side to the agent's key."""
    machine_id = uuid.uuid4()
    box = seal(agent.keyring.public_key, json.dumps({"username": USERNAME, "password": emulator.password}),
               aad=str(machine_id).encode())
    sql.execute("SELECT ops.machine_enroll(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (machine_id, agent.agent_id, pool_id, name, emulator.url, emulator.system_uuid, image_url, box.key_id, box.box))
    return machine_id


def state(sql: psycopg.Connection, machine_id: uuid.UUID) -> str:
    return str(sql.execute("SELECT state FROM compute.machines WHERE machine_id = %s", (machine_id,)).fetchone()[0])


def boot_image(gateway: GatewayProcess, emulator: Emulator, root: Path, hostname: str) -> subprocess.CompletedProcess[str]:
    """What the image does when it boots: `bcd join` with the token from its media URL; the fake
    driver's inventory carries the machine's system uuid (a real bcd reads it from DMI)."""
    media_url = emulator.booted_media()
    assert media_url is not None, "the machine did not boot the image"
    query = parse_qs(urlparse(media_url).query)
    inventory = json.loads(H200_INVENTORY.read_text()) | {"system_uuid": query["bc_system_uuid"][0]}
    root.mkdir(parents=True, exist_ok=True)
    path = root / "inventory.json"
    path.write_text(json.dumps(inventory))
    return subprocess.run([str(BCD), "join", "--gateway", gateway.url, "--token", query["bc_join_token"][0],
                           "--ca-file", str(gateway.ca_path), "--state-dir", str(root / "state"), "--driver", "fake",
                           "--driver-option", f"path={path}", "--driver-option", f"hostname={hostname}"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "py")})


def wait_state(sql: psycopg.Connection, machine_id: uuid.UUID, wanted: str, timeout: float, log: Agent | None = None) -> None:
    deadline = time.monotonic() + timeout
    while (now := state(sql, machine_id)) != wanted:
        assert time.monotonic() < deadline, (f"machine is {now}, not {wanted}, after {timeout} s: "
                                             + str(sql.execute("SELECT last_error, live_op FROM ops.machines WHERE machine_id = %s",
                                                               (machine_id,)).fetchone())
                                             + ("\n" + log.log()[-3000:] if log else ""))
        time.sleep(0.2)


def public_key_b64(sql: psycopg.Connection, node_id: uuid.UUID) -> str | None:
    row = sql.execute("SELECT public_key FROM compute.node_identities WHERE node_id = %s", (node_id,)).fetchone()
    return base64.b64encode(row[0]).decode() if row else None


__all__ = ["SECONDS"]
