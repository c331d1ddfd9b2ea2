"""The real API relay as a child process, for tests: `better-compute serve api` on a free port.

    with running_relay(db_dsn, static_iam(path)) as relay:       # or better_iam(url)
        relay.url, relay.post("sites.create", {...}, token=..., tenant=...), relay.log()

`running_relay` starts `python -m better_compute.cli.main serve api --port 0 …`, waits for its
`listening on http://…` line, and on exit sends SIGTERM (the graceful path) and then SIGKILL if
it lingers. The relay's log (stderr) goes to a file that failures quote.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
START_SECONDS = 30.0
STOP_SECONDS = 15.0
LISTENING = "listening on "
LOG_TAIL_CHARS = 4000


def static_iam(path: Path | str) -> list[str]:
    """Relay arguments for a static IAM file (tests/iam_server.py's write_static_iam writes one)."""
    return ["--iam", "static", "--iam-file", str(path)]


def better_iam(url: str, credential: str = "relay-service-token", timeout: float = 2.0,
               tenant: str = "relay-service-tenant") -> list[str]:
    """Relay arguments for Better IAM at `url` (tests/iam_server.py's IamServer is one)."""
    return ["--iam", "better-iam", "--iam-url", url, "--iam-credential", credential, "--iam-tenant", tenant,
            "--iam-timeout", str(timeout)]


def headers(token: str | None = None, tenant: str | None = None) -> dict[str, str]:
    """The headers of an API call: X-Better-Compute, and the credential and tenant when given."""
    result = {"X-Better-Compute": "1"}
    if token is not None:
        result["Authorization"] = f"Bearer {token}"
    if tenant is not None:
        result["X-Tenant-Id"] = str(tenant)
    return result


@dataclass
class Relay:
    url: str
    process: subprocess.Popen[str]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, timeout: float = 10.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def post(self, method: str, document: Any, token: str | None = None, tenant: str | None = None,
             extra: Mapping[str, str] | None = None) -> httpx.Response:
        """POST one method (`sites.create`) with the API headers."""
        with self.client() as client:
            return client.post("/api/compute/" + method.replace(".", "/", 1), json=document,
                               headers=headers(token, tenant) | dict(extra or {}))

    def data(self, method: str, document: Any, token: str, tenant: str | None = None) -> Any:
        """The data of a call that must succeed (the envelope and the log otherwise)."""
        response = self.post(method, document, token, tenant)
        assert response.status_code == 200, f"{method}: {response.status_code} {response.text}\n{self.tail()}"
        return response.json()["data"]

    def tail(self) -> str:
        return self.log()[-LOG_TAIL_CHARS:]

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def relay_command(dsn: str, iam_args: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "better_compute.cli.main", "serve", "api", "--dsn", dsn, "--port", "0",
            *iam_args, *extra]


def start(command: Sequence[str], env: Mapping[str, str] | None = None) -> Relay:
    """Start the relay and wait for its listening line (an error naming its log if none comes)."""
    log_file = tempfile.NamedTemporaryFile("w", prefix="relay-", suffix=".log", delete=False)
    environment = {**os.environ, "PYTHONPATH": str(REPO / "py"), **(env or {})}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, text=True, env=environment,
                               cwd=REPO)
    log_file.close()
    relay = Relay("", process, Path(log_file.name))
    url = wait_for_listening(process)
    if url is None:
        status = relay.stop()
        log = relay.log()
        relay.log_path.unlink(missing_ok=True)
        raise RelayDidNotStart(status, log)
    relay.url = url
    return relay


def wait_for_listening(process: subprocess.Popen[str], timeout: float = START_SECONDS) -> str | None:
    """The relay's base URL from its listening line; None when it ended or said nothing in time."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            if line.startswith(LISTENING):
                return line[len(LISTENING):].strip()
            if not line:  # stdout closed: the process ended
                return None
    return None


class RelayDidNotStart(Exception):
    """The exit status (None: still running when given up on, then stopped) and the relay's log."""

    def __init__(self, status: int | None, log: str):
        super().__init__(f"the relay did not start (exit status {status}):\n{log[-LOG_TAIL_CHARS:]}")
        self.status = status
        self.log = log


@contextmanager
def running_relay(dsn: str, iam_args: Sequence[str], extra: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> Iterator[Relay]:
    relay = start(relay_command(dsn, iam_args, extra), env)
    try:
        yield relay
    finally:
        relay.stop()
        relay.log_path.unlink(missing_ok=True)
