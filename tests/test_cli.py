"""The tenant CLI (`better-compute sites list`, `reservations create --wait`, `events watch`, `api …`),
driven as a subprocess: against a stand-in relay that checks headers and answers envelopes, and
once end to end against the real relay.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
import typer.main
from psycopg.types.json import Jsonb

from better_compute.cli import app, load
from better_compute.cli.methods import catalog, kebab
from fleet import H200_MODEL, MIG_2X_3G, device_id, h200_inventory
from iam_server import write_static_iam
from relay_support import running_relay, static_iam

CLI = [sys.executable, "-m", "better_compute.cli.main"]
TOKEN = "tok-alice-0123456789"
TENANT = "11111111-1111-4111-8111-111111111111"
POOL = "22222222-2222-4222-8222-222222222222"
RESERVATION = "33333333-3333-4333-8333-333333333333"


# --- a stand-in relay ---------------------------------------------------------------------------------


@dataclass
class Seen:
    method: str  # sites.list
    headers: dict[str, str]  # lower-case names
    body: Any


@dataclass
class FakeRelay:
    """Answers each method from a script (the last answer repeats), records every request; drops
    `drops` connections unanswered; serves `streams` (lists of raw SSE chunks) on GET /watch, one
    per connection, the last one kept open with heartbeats until the client leaves."""

    url: str = ""
    answers: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    drops: int = 0
    streams: list[list[str]] = field(default_factory=list)
    watch_cursors: list[str | None] = field(default_factory=list)

    def data(self, method: str, *datas: Any) -> None:
        self.answers[method] = [(200, {"data": data}) for data in datas]

    def error(self, method: str, status: int, code: str, message: str, hint: str | None) -> None:
        self.answers[method] = [(status, {"error": {"code": code, "message": message, "hint": hint}})]

    def next_answer(self, method: str) -> tuple[int, Any]:
        script = self.answers.get(method) or [(404, {"error": {"code": "NOT_FOUND", "message": f"no method {method}",
                                                               "hint": None}})]
        return script.pop(0) if len(script) > 1 else script[0]

    def bodies(self, method: str) -> list[Any]:
        return [seen.body for seen in self.requests if seen.method == method]


class Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *_: Any) -> None:
        pass

    def send(self, status: int, document: Any, content_type: str = "application/json") -> None:
        body = document.encode() if isinstance(document, str) else json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        relay: FakeRelay = self.server.relay
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method = self.path.removeprefix("/api/compute/").replace("/", ".", 1)
        relay.requests.append(Seen(method, {name.lower(): value for name, value in self.headers.items()}, body))
        if relay.drops:
            relay.drops -= 1
            return  # no answer: the client sees the connection close
        if self.headers.get("X-Better-Compute") != "1":
            self.send(400, {"error": {"code": "INVALID_ARGUMENT", "message": "X-Better-Compute missing", "hint": None}})
            return
        status, document = relay.next_answer(method)
        self.send(status, document, "text/html" if isinstance(document, str) else "application/json")

    def do_GET(self) -> None:
        relay: FakeRelay = self.server.relay
        relay.watch_cursors.append(self.headers.get("Last-Event-ID"))
        script = relay.streams.pop(0) if len(relay.streams) > 1 else relay.streams[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for chunk in script:
                self.wfile.write(chunk.encode())
                self.wfile.flush()
            while script is relay.streams[-1]:  # the last stream stays open until the client goes
                time.sleep(0.1)
                self.wfile.write(b": heartbeat\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.relay = FakeRelay(url=f"http://127.0.0.1:{server.server_address[1]}")  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.relay  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


# --- running the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: no BETTER_COMPUTE_*, no COLUMNS (so tables get 80), profiles under tmp_path."""
    clean = {name: value for name, value in os.environ.items()
             if not name.startswith("BETTER_COMPUTE_") and name not in ("COLUMNS", "LINES")}
    return clean | {"XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONPATH": str(Path(__file__).parents[1] / "py")}


@pytest.fixture
def connected(env: dict[str, str], relay: FakeRelay) -> dict[str, str]:
    return env | {"BETTER_COMPUTE_URL": relay.url, "BETTER_COMPUTE_TOKEN": TOKEN, "BETTER_COMPUTE_TENANT": TENANT}


def bc(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def reservation(state: str = "active", **fields: Any) -> dict[str, Any]:
    """A reservation document as the relay answers it (jsonb order: keys sorted by length)."""
    booking = {"kind": "mig", "node": "node-a", "slot": None, "state": "active",
               "atom_id": "44444444-4444-4444-8444-444444444444",
               "profile": "3g.71gb", "cdi_name": "nvidia.com/gpu=0:0", "placement": 0,
               "device_uuid": "GPU-55555555-5555-4555-8555-555555555555"}
    return {"end": "2030-06-01T14:00:00+00:00", "count": 2, "phase": "running", "shape": "mig:3g.71gb",
            "start": "2030-06-01T12:00:00.123456+00:00", "state": state, "pool_id": POOL,
            "bookings": [booking, booking | {"cdi_name": "nvidia.com/gpu=0:4", "placement": 4}],
            "ended_at": None, "same_node": False, "tenant_id": TENANT, "created_at": "2030-06-01T11:59:58+00:00",
            "end_reason": None, "expires_at": None, "hold_until": None, "project_id": None,
            "reservation_id": RESERVATION} | fields


# --- output -------------------------------------------------------------------------------------------


def test_a_read_sends_the_api_headers_and_prints_a_table(connected: dict[str, str], relay: FakeRelay) -> None:
    sites = [{"name": f"dc-{n}", "site_id": str(uuid.uuid4()), "tenant_id": TENANT,
              "created_at": "2030-06-01T12:00:00.5+00:00"} for n in range(3)]
    relay.data("sites.list", sites)
    lines = ok(bc(connected, "sites", "list")).splitlines()
    assert lines[0].split() == ["name", "site_id", "tenant_id"]  # created_at would pass 80 columns
    assert lines[1].split() == ["dc-0", sites[0]["site_id"], TENANT]  # ids whole: people copy them
    wide = ok(bc(connected | {"COLUMNS": "120"}, "sites", "list")).splitlines()
    assert wide[1].split() == ["dc-0", sites[0]["site_id"], TENANT, "2030-06-01T12:00Z"]
    seen = relay.requests[0]
    assert seen.method == "sites.list" and seen.body == {}  # a read carries no idempotency key
    assert (seen.headers["x-better-compute"], seen.headers["authorization"], seen.headers["x-tenant-id"]) == \
        ("1", f"Bearer {TOKEN}", TENANT)


def test_json_prints_the_data_and_global_options_go_before_the_group_or_after_the_command(
        connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.get", reservation())
    after = ok(bc(connected, "reservations", "get", "--reservation-id", RESERVATION, "--format", "json"))
    before = ok(bc(connected, "--format", "json", "reservations", "get", "--reservation-id", RESERVATION))
    assert json.loads(after) == json.loads(before) == reservation()
    overridden = ok(bc(connected, "--format", "json", "reservations", "get", "--reservation-id", RESERVATION,
                       "--format", "table"))
    assert overridden.startswith(f"reservation_id: {RESERVATION}\n")  # after the command wins


def test_one_object_is_key_value_lines_with_its_lists_as_tables(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.get", reservation())
    lines = ok(bc(connected, "reservations", "get", "--reservation-id", RESERVATION)).splitlines()
    assert lines[:4] == [f"reservation_id: {RESERVATION}", "phase: active", "state: active", "shape: mig:3g.71gb"]
    assert "ended_at: null" in lines and f"pool_id: {POOL}" in lines
    table = lines[lines.index("bookings:") + 1:]
    assert table[0].split()[:4] == ["state", "node", "cdi_name", "kind"]
    assert [row.split()[2] for row in table[1:]] == ["nvidia.com/gpu=0:0", "nvidia.com/gpu=0:4"]
    assert all(len(line) <= 80 for line in table)


def test_tables_fit_80_columns(connected: dict[str, str], relay: FakeRelay) -> None:
    rows = [reservation(reason="x" * 200, project_id=str(uuid.uuid4())) for _ in range(4)]
    relay.data("reservations.list", rows)
    lines = ok(bc(connected, "reservations", "list")).splitlines()
    assert len(lines) == 5 and all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0].split()[:5] == ["reservation_id", "phase", "state", "shape", "count"]
    assert lines[1].startswith(RESERVATION + " ")
    wide = ok(bc(connected | {"COLUMNS": "300"}, "reservations", "list")).splitlines()
    assert "reason" in wide[0].split() and "x" * 29 + "…" in wide[1]  # long cells are cut with …


def test_query_picks_one_field(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.get", reservation())
    get = ("reservations", "get", "--reservation-id", RESERVATION)
    assert ok(bc(connected, *get, "--query", "bookings.1.cdi_name")) == "nvidia.com/gpu=0:4\n"
    assert ok(bc(connected, *get, "--query", "bookings.1.cdi_name", "--format", "json")) == '"nvidia.com/gpu=0:4"\n'
    assert json.loads(ok(bc(connected, *get, "--query", "bookings.0", "--format", "json")))["placement"] == 0
    missing = bc(connected, *get, "--query", "bookings.7.cdi_name")
    assert missing.returncode == 1 and missing.stderr.startswith("QUERY_NOT_FOUND: bookings is a list of 2")


# --- inputs -------------------------------------------------------------------------------------------


def test_options_are_typed_from_the_input_schema(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation())
    ok(bc(connected, "reservations", "create", "--pool-id", POOL, "--shape", "mig:3g.71gb", "--count", "2",
          "--end", "2030-06-01T14:00:00Z", "--no-same-node", "--hold-seconds", "60"))
    relay.data("webhooks.create", {"webhook_id": str(uuid.uuid4())})
    ok(bc(connected, "webhooks", "create", "--url", "https://hooks.example/bc", "--secret", "s" * 32,
          "--event-types", '["reservation.activated"]'))
    [created] = relay.bodies("reservations.create")
    assert {key: value for key, value in created.items() if key != "idempotency_key"} == {
        "pool_id": POOL, "shape": "mig:3g.71gb", "count": 2, "end": "2030-06-01T14:00:00Z", "same_node": False,
        "hold_seconds": 60}
    [hook] = relay.bodies("webhooks.create")
    assert hook["url"] == "https://hooks.example/bc" and hook["event_types"] == ["reservation.activated"]
    [seen, _] = relay.requests
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"  # --url on webhooks create was the input's


def test_a_mutation_carries_a_fresh_idempotency_key_unless_given(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("sites.create", {"site_id": str(uuid.uuid4()), "name": "dc1"})
    for _ in range(2):
        ok(bc(connected, "sites", "create", "--name", "dc1"))
    ok(bc(connected, "sites", "create", "--name", "dc1", "--idempotency-key", "mine-1"))
    keys = [body["idempotency_key"] for body in relay.bodies("sites.create")]
    assert uuid.UUID(keys[0]) and uuid.UUID(keys[1]) and keys[0] != keys[1] and keys[2] == "mine-1"


def test_api_calls_any_method(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.extend", reservation())
    relay.data("joinTokens.create", {"token_id": str(uuid.uuid4()), "token": "bcjt_secret"})
    relay.data("future.thing", {"ok": True})
    ok(bc(connected, "api", "reservations.extend", f"reservation_id={RESERVATION}", "end=2030-06-01T15:00:00Z",
          "count:=3", "same_node:=true", "note=a=b"))
    assert ok(bc(connected, "api", "join-tokens.create", f"pool_id={POOL}", "--query", "token")) == "bcjt_secret\n"
    assert json.loads(ok(bc(connected, "api", "future.thing", "x:=[1]", "--format", "json"))) == {"ok": True}
    [extend] = relay.bodies("reservations.extend")
    assert extend | {"idempotency_key": "k"} == {"reservation_id": RESERVATION, "end": "2030-06-01T15:00:00Z",
                                                  "count": 3, "same_node": True, "note": "a=b", "idempotency_key": "k"}
    assert uuid.UUID(extend["idempotency_key"])
    assert "idempotency_key" in relay.bodies("joinTokens.create")[0]
    assert relay.bodies("future.thing") == [{"x": [1]}]  # unknown to the catalog: sent as it is


@pytest.mark.parametrize("args", [
    ("reservations", "create", "--shape", "gpu", "--count", "1", "--end", "2030-01-01T00:00:00Z"),  # no --pool-id
    ("reservations", "create", "--pool-id", POOL, "--shape", "gpu", "--count", "two", "--end", "x"),
    ("reservations", "create", "--pool-id", POOL, "--shape", "gpu", "--count", "0", "--end", "x"),  # minimum 1
    ("pools", "update", "--pool-id", POOL, "--placement-policy", "random"),  # not in the enum
    ("webhooks", "create", "--url", "https://h", "--secret", "s", "--event-types", "[oops"),
    ("webhooks", "create", "--url", "https://h", "--secret", "s", "--event-types", '{"a": 1}'),  # not an array
    ("sites", "list", "--bogus"),
    ("api", "sites.create", "name"),
    ("api", "sites.create", "count:={"),
    ("api", "sites"),
    ("sites", "list", "--query", "bookings..name"),
    ("sites", "list", "--profile", "nope"),
])
def test_usage_errors_exit_2_and_send_nothing(connected: dict[str, str], relay: FakeRelay,
                                              args: tuple[str, ...]) -> None:
    result = bc(connected, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert relay.requests == []


def test_no_relay_url_is_a_usage_error(env: dict[str, str]) -> None:
    result = bc(env, "sites", "list")
    assert result.returncode == 2 and "no relay URL" in result.stderr


# --- errors -------------------------------------------------------------------------------------------


def test_an_error_answer_prints_code_message_and_hint(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.error("reservations.create", 409, "CAPACITY_CONFLICT", "no 2 free mig:3g.71gb in the window",
                "Ask capacity.earliest for a start that fits.")
    result = bc(connected, "reservations", "create", "--pool-id", POOL, "--shape", "mig:3g.71gb", "--count", "2",
                "--end", "2030-06-01T14:00:00Z")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("CAPACITY_CONFLICT: no 2 free mig:3g.71gb in the window\n"  # the hint in CLI terms
                             "Hint: Ask `better-compute capacity earliest` for a start that fits.\n")
    relay.error("sites.get", 404, "NOT_FOUND", "no site x", None)
    result = bc(connected, "sites", "get", "--site-id", POOL)
    assert (result.returncode, result.stderr) == (1, "NOT_FOUND: no site x\n")


def test_an_answer_that_is_no_envelope_is_an_http_error(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.answers["sites.list"] = [(502, "<html>Bad Gateway</html>")]
    result = bc(connected, "sites", "list")
    assert result.returncode == 1 and result.stderr.startswith("HTTP_ERROR: 502 Bad Gateway from ")
    assert "\nHint: " in result.stderr


def test_an_unreachable_relay_is_a_connection_error(connected: dict[str, str], relay: FakeRelay) -> None:
    result = bc(connected | {"BETTER_COMPUTE_URL": "http://127.0.0.1:9"}, "sites", "list")
    assert result.returncode == 1 and result.stderr.startswith("CONNECTION_ERROR: cannot reach http://127.0.0.1:9")
    assert "\nHint: Check --url" in result.stderr


def test_a_dropped_mutation_is_sent_again_with_the_same_key(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("sites.create", {"site_id": str(uuid.uuid4()), "name": "dc1"})
    relay.drops = 1
    assert ok(bc(connected, "sites", "create", "--name", "dc1", "--query", "name")) == "dc1\n"
    first, second = relay.bodies("sites.create")
    assert first == second and uuid.UUID(first["idempotency_key"])
    relay.drops = 2
    result = bc(connected, "sites", "create", "--name", "dc1")
    assert result.returncode == 1 and result.stderr.startswith("CONNECTION_ERROR: ")
    assert len(relay.bodies("sites.create")) == 4  # one retry, no more


# --- configuration ------------------------------------------------------------------------------------


def test_flags_beat_the_environment_which_beats_the_profile(env: dict[str, str], relay: FakeRelay,
                                                             tmp_path: Path) -> None:
    relay.data("sites.list", [])
    ok(bc(env, "profile", "save", "--url", relay.url, "--token", "profile-token-123456", "--tenant", "t-profile"))
    ok(bc(env, "profile", "save", "--name", "other", "--url", relay.url, "--token", "other-token-123456"))
    path = tmp_path / "config" / "better-compute" / "profiles.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ok(bc(env, "sites", "list")) == "(none)\n"
    ok(bc(env | {"BETTER_COMPUTE_TOKEN": "env-token"}, "sites", "list"))
    ok(bc(env | {"BETTER_COMPUTE_TOKEN": "env-token"}, "sites", "list", "--token", "flag-token"))
    ok(bc(env | {"BETTER_COMPUTE_TOKEN": "env-token"}, "--token", "root-flag-token", "sites", "list"))
    ok(bc(env, "sites", "list", "--profile", "other"))
    ok(bc(env | {"BETTER_COMPUTE_PROFILE": "other", "BETTER_COMPUTE_TENANT": "t-env"}, "sites", "list"))
    seen = [(request.headers["authorization"].removeprefix("Bearer "), request.headers.get("x-tenant-id"))
            for request in relay.requests]
    assert seen == [("profile-token-123456", "t-profile"), ("env-token", "t-profile"), ("flag-token", "t-profile"),
                    ("root-flag-token", "t-profile"), ("other-token-123456", None), ("other-token-123456", "t-env")]


def test_profile_list_and_show_mask_the_token(env: dict[str, str], relay: FakeRelay) -> None:
    ok(bc(env, "profile", "save", "--url", relay.url, "--token", "secret-token-0123456789"))
    ok(bc(env, "profile", "save", "--tenant", TENANT))  # keeps the url and the token
    listed = ok(bc(env, "profile", "list"))
    shown = ok(bc(env, "profile", "show"))
    for text in (listed, shown):
        assert "secret-token-0123456789" not in text and "secr…" in text and relay.url in text and TENANT in text
    assert bc(env, "profile", "show", "missing").returncode == 1
    assert bc(env, "profile", "save", "--name", "bad name", "--url", relay.url).returncode == 2


# --- reservations create --wait -----------------------------------------------------------------------


CREATE = ("reservations", "create", "--pool-id", POOL, "--shape", "mig:3g.71gb", "--count", "2",
          "--end", "2030-06-01T14:00:00Z", "--wait")


def test_wait_polls_until_the_reservation_is_active(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation("provisional"))
    relay.data("reservations.get", reservation("provisional"), reservation("active"))
    result = bc(connected, *CREATE, "--format", "json")
    assert json.loads(ok(result))["state"] == "active"
    assert "is provisional" in result.stderr and "is ready" in result.stderr  # a server without readiness: active
    assert relay.bodies("reservations.get") == [{"reservation_id": RESERVATION}] * 2


WAITING = {"state": "waiting_for_node", "reason": "node node-a (connected) has not acknowledged spec generation 7"}
READY = {"state": "ready", "reason": None}
FAILED = {"state": "failed", "reason": "DevicesUnresolved: GPU-5 has no MIG device(s) 3g.71gb@0"}


def test_wait_waits_for_the_node_to_expose_the_devices_not_for_active(connected: dict[str, str],
                                                                      relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation("provisional"))
    relay.data("reservations.get", reservation("active", readiness=WAITING), reservation("active", readiness=READY))
    result = bc(connected, *CREATE, "--format", "json")
    assert json.loads(ok(result))["readiness"] == READY
    assert "has not acknowledged spec generation 7" in result.stderr and "is ready" in result.stderr


def test_wait_fails_with_the_nodes_condition_when_it_cannot_expose_a_device(connected: dict[str, str],
                                                                           relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation("provisional"))
    relay.data("reservations.get", reservation("active", readiness=FAILED))
    failed = bc(connected, *CREATE)
    assert failed.returncode == 1 and failed.stdout == ""
    assert f"NOT_READY: reservation {RESERVATION} is active but its node cannot expose its devices: {FAILED['reason']}" \
        in failed.stderr
    relay.data("reservations.get", reservation("active", readiness=WAITING))
    late = bc(connected, *CREATE, "--timeout", "0.5")
    assert late.returncode == 1 and "TIMEOUT: reservation" in late.stderr and WAITING["reason"] in late.stderr


def test_wait_fails_when_the_reservation_ends_or_time_runs_out(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation("provisional"))
    relay.data("reservations.get", reservation("void", end_reason="denied"))
    ended = bc(connected, *CREATE)
    assert ended.returncode == 1 and f"RESERVATION_ENDED: reservation {RESERVATION} is void (denied)" in ended.stderr
    relay.data("reservations.get", reservation("provisional"))
    late = bc(connected, *CREATE, "--timeout", "0.5")
    assert late.returncode == 1 and "TIMEOUT: reservation" in late.stderr and "still provisional" in late.stderr


# --- events watch -------------------------------------------------------------------------------------


def sse(cursor: str, event_type: str) -> str:
    event = {"id": cursor, "type": event_type, "aggregate_type": "reservation", "aggregate_id": RESERVATION,
             "seq": 1, "payload": {}, "occurred_at": "2030-06-01T12:00:00+00:00"}
    return f"id: {cursor}\ndata: {json.dumps(event)}\n\n"


def ctrl_c_as_at_a_terminal() -> None:
    """SIGINT as a shell's foreground job has it: pytest run as a background job of a script
    inherits SIGINT ignored, and so would the CLI, which the Ctrl-C below would then not stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def watch_lines(env: dict[str, str], count: int, *args: str) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Run `events watch`, read `count` lines, Ctrl-C it; the lines and how it ended."""
    process = subprocess.Popen([*CLI, "events", "watch", *args], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    assert process.stdout is not None
    lines = []
    try:
        for _ in range(count):
            lines.append(process.stdout.readline().rstrip("\n"))
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    return lines, subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_watch_resumes_after_a_dropped_stream_and_ctrl_c_exits_0(connected: dict[str, str],
                                                                 relay: FakeRelay) -> None:
    relay.streams = [[": hello\n\n", sse("1:1", "site.created"), sse("1:2", "pool.created")],
                     [sse("1:3", "reservation.activated")]]
    lines, ended = watch_lines(connected, 3, "--after", "0:9")
    assert ended.returncode == 0, ended.stderr
    assert [line.split()[1] for line in lines] == ["site.created", "pool.created", "reservation.activated"]
    assert lines[0].split() == ["2030-06-01T12:00Z", "site.created", f"reservation/{RESERVATION}", "1:1"]
    assert relay.watch_cursors[:2] == ["0:9", "1:2"]  # resumed from the last event printed
    assert "reconnecting" in ended.stderr
    assert relay.requests == []  # and no POST


def test_watch_prints_one_json_per_line(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.streams = [[sse("1:1", "site.created"), sse("1:2", "pool.created")]]
    lines, ended = watch_lines(connected, 2, "--format", "json", "--since", "beginning")
    assert ended.returncode == 0 and [json.loads(line)["id"] for line in lines] == ["1:1", "1:2"]
    assert relay.watch_cursors[0] is None


# --- the catalog and the other groups -----------------------------------------------------------------


def test_every_catalog_method_is_a_command_with_its_inputs_as_options() -> None:
    root = typer.main.get_command(app)
    groups = {name: load(name) for name in {kebab(method.group) for method in catalog().values()}}
    for method in catalog().values():
        schema = method.input_schema
        assert schema["type"] == "object" and schema.get("additionalProperties") is False, method.name
        assert method.kind in ("read", "mutation")
        assert ("idempotency_key" in schema["properties"]) == method.mutation, method.name
        assert kebab(method.group) in root.commands  # type: ignore[attr-defined]
        if method.name == "machines.enroll":  # hand-written: it takes a password file and seals (cli/machines.py)
            continue
        command = groups[kebab(method.group)].commands[method.command]  # type: ignore[attr-defined]
        flags = {flag for param in command.params for flag in param.opts}
        assert {f"--{kebab(prop)}" for prop in schema["properties"]} <= flags, method.name
    assert "watch" in groups["events"].commands  # type: ignore[attr-defined]


def test_the_other_groups_still_work(env: dict[str, str]) -> None:
    audit = ok(bc(env, "audit", "--help"))
    assert all(command in audit for command in ("export", "verify", "proof"))
    for group in ("dev", "db", "serve", "profile"):
        ok(bc(env, group, "--help"))


# --- end to end, against the real relay ---------------------------------------------------------------


def register_node(dsn: str, pool_id: str) -> None:
    """A node with one H200 split into two 3g.71gb MIG instances (what `bcd join` would register)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT compute.node_register(%s, %s, %s)",
                     (pool_id, "node-a", Jsonb(h200_inventory("node-a", 1))))
        conn.execute("SELECT compute.device_set_layout(%s, %s)", (device_id(conn, uuid.UUID(pool_id), 1, 0), MIG_2X_3G))


def test_acceptance_site_pool_offering_reservation_release(db_dsn: str, env: dict[str, str], tmp_path: Path) -> None:
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "alice", TENANT, [
        {"effect": "allow", "actions": ["compute:*"], "resources": ["*"]}])])
    with running_relay(db_dsn, static_iam(iam)) as real:
        user = env | {"BETTER_COMPUTE_URL": real.url, "BETTER_COMPUTE_TOKEN": TOKEN, "BETTER_COMPUTE_TENANT": TENANT}
        site_id = ok(bc(user, "sites", "create", "--name", "dc1", "--query", "site_id")).strip()
        pool = json.loads(ok(bc(user, "pools", "create", "--site-id", site_id, "--name", "h200",
                                "--gpu-model", H200_MODEL, "--format", "json")))
        offering = ok(bc(user, "offerings", "create", "--pool-id", pool["pool_id"], "--shape", "mig:3g.71gb",
                         "--max-count", "8", "--max-duration-seconds", "86400"))
        assert "shape: mig:3g.71gb" in offering.splitlines()
        register_node(db_dsn, pool["pool_id"])
        end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat(timespec="seconds")
        # The walkthrough: active is not usable. No node runs here, so none exposed the MIG
        # devices: --wait does not print the reservation as if it were; it says what it waits for.
        created = bc(user, "reservations", "create", "--pool-id", pool["pool_id"], "--shape", "mig:3g.71gb",
                     "--count", "2", "--end", end, "--wait", "--timeout", "1")
        assert created.returncode == 1 and created.stdout == "", created.stdout
        assert "TIMEOUT: reservation " in created.stderr and "is still active, waiting_for_node: node node-a" in created.stderr
        assert "has not acknowledged spec generation" in created.stderr
        reservation_id = created.stderr.split("TIMEOUT: reservation ")[1].split()[0]
        table = ok(bc(user, "reservations", "list")).splitlines()
        assert table[0].split()[:3] == ["reservation_id", "phase", "state"] and all(len(line) <= 80 for line in table)
        assert table[1].split()[:3] == [reservation_id, "active", "active"]  # held, no node exposed it: not ready
        document = json.loads(ok(bc(user, "--format", "json", "reservations", "get", "--reservation-id",
                                    reservation_id)))
        # The node has reported no MIG instance yet: nothing it could expose, so no CDI name.
        assert [booking["cdi_name"] for booking in document["bookings"]] == [None, None]
        full = bc(user, "reservations", "create", "--pool-id", pool["pool_id"], "--shape", "mig:3g.71gb",
                  "--count", "1", "--end", end)
        assert full.returncode == 1 and full.stderr.startswith("CAPACITY_CONFLICT: ") and "\nHint: " in full.stderr
        released = ok(bc(user, "reservations", "release", "--reservation-id", reservation_id, "--query", "state"))
        assert released == "released\n"
        events = json.loads(ok(bc(user, "events", "list", "--format", "json")))["events"]
        assert events[-1]["type"].startswith("reservation.")
        [last], watched = watch_lines(user, 1, "--after", events[-2]["id"], "--format", "json")
        assert watched.returncode == 0 and json.loads(last) == events[-1]
        missing = bc(user, "sites", "get", "--site-id", str(uuid.uuid4()))
        assert missing.returncode == 1 and missing.stderr.startswith("NOT_FOUND: ")
        denied = bc(user | {"BETTER_COMPUTE_TOKEN": "wrong"}, "sites", "list")
        assert denied.returncode == 1 and denied.stderr.startswith("ACCESS_DENIED: "), denied.stderr
        assert "\nHint: Check your token" in denied.stderr  # not "ask your administrator for a permission"


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_catalog_is_the_databases(db_dsn: str) -> None:
    """catalog.json is a snapshot of api.catalog(); after a change to api.methods, run
    scripts/catalog_snapshot.py "$DSN"."""
    snapshot = load_script("catalog_snapshot")
    assert json.loads(snapshot.CATALOG.read_text()) == snapshot.snapshot(db_dsn)


# --- habits (issue 17): formats, columns, --for, phase, --watch, --since now, whoami, --version ---------


def test_yaml_and_columns(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.list", [reservation(), reservation("released", reservation_id=str(uuid.uuid4()))])
    picked = ok(bc(connected, "reservations", "list", "--columns", "reservation_id,phase,end")).splitlines()
    assert picked[0].split() == ["reservation_id", "phase", "end"]
    assert picked[1].split() == [RESERVATION, "active", "2030-06-01T14:00Z"]
    assert picked[2].split()[1] == "ended"
    import yaml

    rows = yaml.safe_load(ok(bc(connected, "reservations", "list", "-o", "yaml", "--columns", "reservation_id,phase")))
    assert rows[0] == {"reservation_id": RESERVATION, "phase": "running"}  # yaml and json: the API's answer


def test_phase_is_pending_active_ready_or_ended() -> None:
    from better_compute.cli.reservations import phase

    ready = {"state": "ready", "reason": None}
    assert [phase(reservation(state, **fields)) for state, fields in [
        ("provisional", {}), ("active", {"phase": "upcoming"}), ("active", {"readiness": {"state": "waiting_for_node"}}),
        ("active", {"readiness": ready}), ("active", {"readiness": ready, "phase": "ended"}), ("void", {})]] == \
        ["pending", "pending", "active", "ready", "ended", "ended"]


def test_for_sets_the_end_from_the_start_or_now(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("reservations.create", reservation())
    create = ("reservations", "create", "--pool-id", POOL, "--shape", "gpu", "--count", "1")
    ok(bc(connected, *create, "--start", "2030-06-01T12:00:00Z", "--for", "1d2h30m"))
    before = datetime.now(timezone.utc)
    ok(bc(connected, *create, "--for", "90m"))
    first, second = relay.bodies("reservations.create")
    assert (first["start"], first["end"]) == ("2030-06-01T12:00:00Z", "2030-06-02T14:30:00+00:00")
    assert timedelta(minutes=89) < datetime.fromisoformat(second["end"]) - before < timedelta(minutes=91)


def test_watch_shows_the_list_again_until_ctrl_c(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("nodes.list", [{"node_id": str(uuid.uuid4()), "name": "node-a"}], [{"node_id": str(uuid.uuid4()), "name": "node-b"}])
    process = subprocess.Popen([*CLI, "nodes", "list", "-w", "--interval", "0.5"], env=connected, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    assert process.stdout is not None
    seen = [process.stdout.readline() for _ in range(6)]
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert seen[0].startswith("every 0.5s") and seen[3].startswith("every 0.5s")
    assert "node-a" in seen[2] and "node-b" in seen[5] and len(relay.bodies("nodes.list")) >= 2


def test_events_watch_starts_from_now_by_default(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("events.list", {"events": [{"id": "1:1"}], "next": "1:1"}, {"events": [], "next": "1:1"})
    relay.streams = [[sse("1:2", "site.created")]]
    [printed], ended = watch_lines(connected, 1, "--format", "json")
    assert ended.returncode == 0 and json.loads(printed)["id"] == "1:2"
    assert relay.bodies("events.list") == [{"limit": 1000}, {"limit": 1000, "after": "1:1"}]
    assert relay.watch_cursors[0] == "1:1"  # the stream starts after the newest event


def test_whoami_and_version(connected: dict[str, str], relay: FakeRelay) -> None:
    relay.data("sites.list", [])
    lines = ok(bc(connected, "whoami")).splitlines()
    assert f"url: {relay.url}" in lines and "url_from: $BETTER_COMPUTE_URL" in lines and "credential: accepted" in lines
    assert f"tenant: {TENANT}" in lines and not any(TOKEN in line for line in lines)
    relay.error("sites.list", 403, "ACCESS_DENIED", "denied: unknown credential", "Ask your administrator for the permission")
    denied = bc(connected, "whoami", "--token", "wrong-token-123456")
    assert denied.returncode == 1 and "token_from: --token" in denied.stdout
    assert denied.stderr.splitlines()[1].startswith("Hint: Check your token: --token, BETTER_COMPUTE_TOKEN")
    assert ok(bc(connected, "--version")).startswith("better-compute ")
