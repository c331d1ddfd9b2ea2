"""A Better IAM stand-in for tests, and the writer of static IAM files.

`IamServer` is a real HTTP server on 127.0.0.1 (a ThreadingHTTPServer in a thread) that speaks
Better IAM's envelope: `POST /authorize` answers `{data: {allowed, reason, matched, principal}}`
or `{error: {code, message}}`, `GET /actions` answers the catalog `{data: {actions}}` (our assumed
catalog endpoint, see better_compute.ports.iam). It is strict about what it receives (the
`X-Better-IAM: 1` header, a JSON body of the authorize shape), so a port that sends something else
is denied, and it counts and keeps every request, so a test can check "exactly one decision".

    with IamServer(mode="allow") as iam:
        ... iam.url, iam.calls, iam.requests(), iam.reset(), iam.configure(mode="deny")

The same server runs as a process (`python tests/iam_server.py --port 0 [--mode deny] [--config
behaviour.json]` prints its port on stdout's first line) for tests that want it outside their own
process; `running_iam_server(...)` starts one and answers a `RemoteIam` with the same reading and
configuring methods, which go over the `/_test/...` endpoints.

Only the standard library is used, so the file runs as a script from any interpreter.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

MODES = ("allow", "deny", "policy", "error", "garbage")
REQUEST_BYTES_MAX = 1048576
TEST_PRINCIPAL = "user:iam-test-server"
START_SECONDS_MAX = 10.0


@dataclass(frozen=True)
class TokenPolicy:
    """What one bearer token may do in mode "policy": its tenant (None: any) and action globs."""

    principal: str
    tenant: str | None = None
    actions: tuple[str, ...] = ("*",)


@dataclass(frozen=True)
class Behaviour:
    """How the server answers.

    mode: "allow" everything, "deny" everything, "policy" (per token, `policies`), "error" (the
    error envelope `error_code` with `error_status`), "garbage" (`garbage` with `garbage_status`,
    for both endpoints). In every deciding mode an action matching a `deny_actions` glob is denied,
    and, when `catalog` is set, an action outside it is denied as Better IAM does ("unknown
    action"). `GET /actions` answers `catalog` (NOT_CONFIGURED when it is None) and demands
    `service_token` when that is set. `delay` seconds pass before any answer, and with `trickle`
    the body goes one byte every `trickle` seconds (timeout tests: each read is quick, the whole
    answer is not).
    """

    mode: str = "allow"
    deny_actions: tuple[str, ...] = ()
    policies: Mapping[str, TokenPolicy] = field(default_factory=dict)
    catalog: tuple[str, ...] | None = None
    service_token: str | None = None
    delay: float = 0.0
    trickle: float = 0.0
    error_code: str = "INTERNAL"
    error_status: int = 500
    garbage: str = "<html>not the envelope</html>"
    garbage_status: int = 200

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")

    def changed(self, **changes: Any) -> Behaviour:
        return Behaviour.from_json({**self.as_json(), **changes})

    def as_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["policies"] = {token: dataclasses.asdict(policy) for token, policy in self.policies.items()}
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Behaviour:
        """From JSON (a config file, `/_test/configure`) or keyword arguments: lists become tuples,
        policies may be TokenPolicy values or their dicts."""
        values = dict(document)
        for name in ("deny_actions", "catalog"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        values["policies"] = {token: policy if isinstance(policy, TokenPolicy) else
                              TokenPolicy(policy["principal"], policy.get("tenant"), tuple(policy.get("actions", ("*",))))
                              for token, policy in values.get("policies", {}).items()}
        return cls(**values)


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lowercased
    body: Any  # the JSON value, or None when there was none or it was not JSON

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    trickle: float = 0.0  # seconds between the body's bytes

    @classmethod
    def envelope(cls, status: int, document: Mapping[str, Any]) -> Reply:
        return cls(status, json.dumps(document).encode())

    @classmethod
    def error(cls, status: int, code: str, message: str) -> Reply:
        return cls.envelope(status, {"error": {"code": code, "message": message}})


def bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization", "")
    return value[len("Bearer "):] if value.startswith("Bearer ") else None


def authorize_problem(request: ReceivedRequest) -> str | None:
    """What is wrong with an authorize request, if anything (Better IAM would refuse it)."""
    if request.header("x-better-iam") != "1":
        return "the X-Better-IAM: 1 header is missing"
    if not (request.header("content-type") or "").startswith("application/json"):
        return "the body must be application/json"
    body = request.body
    resource = body.get("resource") if isinstance(body, dict) else None
    if not (isinstance(body, dict) and set(body) == {"tenantId", "action", "resource", "attributes"}
            and isinstance(body["tenantId"], str) and isinstance(body["action"], str)
            and isinstance(resource, dict) and set(resource) == {"type", "id"}
            and all(isinstance(value, str) for value in resource.values())
            and isinstance(body["attributes"], dict)):
        return "the body must be {tenantId, action, resource: {type, id}, attributes}"
    return None


def decide(behaviour: Behaviour, token: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
    """The `data` of an authorize answer in a deciding mode."""
    action, tenant = body["action"], body["tenantId"]
    policy = behaviour.policies.get(token) if token else None
    principal = policy.principal if policy else None if behaviour.mode == "policy" else TEST_PRINCIPAL

    def deny(reason: str) -> dict[str, Any]:
        return {"allowed": False, "reason": reason, "matched": [], "principal": principal}

    if behaviour.catalog is not None and action not in behaviour.catalog:
        return deny("unknown action")
    if any(fnmatch.fnmatchcase(action, glob) for glob in behaviour.deny_actions):
        return deny(f"action {action} is denied by the test server")
    if behaviour.mode == "deny":
        return deny("the test server denies everything")
    if behaviour.mode == "policy":
        if policy is None:
            return deny("unknown credential")
        if policy.tenant is not None and policy.tenant != tenant:
            return deny(f"credential is not of tenant {tenant}")
        if not any(fnmatch.fnmatchcase(action, glob) for glob in policy.actions):
            return deny("no statement allows")
        matched = [{"effect": "allow", "actions": list(policy.actions)}]
        return {"allowed": True, "reason": "allowed by policy", "matched": matched, "principal": principal}
    return {"allowed": True, "reason": "the test server allows everything", "matched": [{"effect": "allow", "actions": ["*"]}],
            "principal": principal}


class IamState:
    """The behaviour, counters and received requests, shared by the handler threads."""

    def __init__(self, behaviour: Behaviour):
        self.lock = threading.Lock()
        self.behaviour = behaviour
        self.received: list[ReceivedRequest] = []
        self.stopping = threading.Event()

    def record(self, request: ReceivedRequest) -> Behaviour:
        with self.lock:
            self.received.append(request)
            return self.behaviour

    def snapshot(self) -> list[ReceivedRequest]:
        with self.lock:
            return list(self.received)

    def reset(self) -> None:
        with self.lock:
            self.received.clear()

    def configure(self, **changes: Any) -> Behaviour:
        with self.lock:
            self.behaviour = self.behaviour.changed(**changes)
            return self.behaviour

    def counts(self) -> dict[str, int]:
        requests = self.snapshot()
        return {"authorize": sum(1 for r in requests if r.path == "/authorize"),
                "actions": sum(1 for r in requests if r.path == "/actions")}

    def answer(self, request: ReceivedRequest) -> Reply:
        """Control endpoints answer at once; IAM endpoints are recorded, delayed, then answered."""
        if request.path.startswith("/_test/"):
            return self.control(request)
        behaviour = self.record(request)
        self.stopping.wait(behaviour.delay)
        return dataclasses.replace(self.iam_reply(request, behaviour), trickle=behaviour.trickle)

    def iam_reply(self, request: ReceivedRequest, behaviour: Behaviour) -> Reply:
        if behaviour.mode == "error":
            return Reply.error(behaviour.error_status, behaviour.error_code, "the test server answers an error")
        if behaviour.mode == "garbage":
            return Reply(behaviour.garbage_status, behaviour.garbage.encode())
        if (request.method, request.path) == ("POST", "/authorize"):
            problem = authorize_problem(request)
            if problem:
                return Reply.error(400, "INVALID_ARGUMENT", problem)
            return Reply.envelope(200, {"data": decide(behaviour, bearer(request.headers), request.body)})
        if (request.method, request.path) == ("GET", "/actions"):
            return catalog_reply(behaviour, request)
        return Reply.error(404, "NOT_FOUND", f"{request.method} {request.path}")

    def control(self, request: ReceivedRequest) -> Reply:
        if (request.method, request.path) == ("GET", "/_test/calls"):
            return Reply.envelope(200, {"data": {**self.counts(), "requests": [r.as_json() for r in self.snapshot()]}})
        if (request.method, request.path) == ("POST", "/_test/reset"):
            self.reset()
            return Reply.envelope(200, {"data": {}})
        if (request.method, request.path) == ("POST", "/_test/configure") and isinstance(request.body, dict):
            try:
                return Reply.envelope(200, {"data": self.configure(**request.body).as_json()})
            except (TypeError, ValueError, KeyError) as error:
                return Reply.error(400, "INVALID_ARGUMENT", str(error))
        return Reply.error(404, "NOT_FOUND", f"{request.method} {request.path}")


def catalog_reply(behaviour: Behaviour, request: ReceivedRequest) -> Reply:
    if request.header("x-better-iam") != "1":
        return Reply.error(400, "INVALID_ARGUMENT", "the X-Better-IAM: 1 header is missing")
    if behaviour.service_token is not None and bearer(request.headers) != behaviour.service_token:
        return Reply.error(401, "UNAUTHENTICATED", "GET /actions needs the service credential")
    if behaviour.catalog is None:
        return Reply.error(501, "NOT_CONFIGURED", "this test server was started without a catalog")
    return Reply.envelope(200, {"data": {"actions": list(behaviour.catalog)}})


class QuietServer(ThreadingHTTPServer):
    """Handler threads are daemons and a client that went away (a timeout test) is not an error."""

    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def make_server(state: IamState, host: str, port: int) -> QuietServer:
    class Handle(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.serve()

        def do_POST(self) -> None:
            self.serve()

        def serve(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), REQUEST_BYTES_MAX)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = state.answer(ReceivedRequest(self.command, self.path, headers, body))
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.send_body(reply)

        def send_body(self, reply: Reply) -> None:
            """All at once, or one byte every `trickle` seconds until done or the server stops."""
            if not reply.trickle:
                self.wfile.write(reply.body)
                return
            for index in range(len(reply.body)):
                self.wfile.write(reply.body[index:index + 1])
                self.wfile.flush()
                if state.stopping.wait(reply.trickle):
                    return

        def log_message(self, *_args: object) -> None:
            pass

    return QuietServer((host, port), Handle)


class IamServer:
    """The server in a thread of this process; a context manager (see the module docstring)."""

    def __init__(self, mode: str = "allow", **behaviour: Any):
        self.state = IamState(Behaviour.from_json({"mode": mode, **behaviour}))
        self.server: QuietServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None, "the server is not running"
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def calls(self) -> int:
        """POST /authorize requests received since the start or the last reset()."""
        return self.state.counts()["authorize"]

    @property
    def catalog_calls(self) -> int:
        return self.state.counts()["actions"]

    def requests(self) -> list[ReceivedRequest]:
        return self.state.snapshot()

    def reset(self) -> None:
        self.state.reset()

    def configure(self, **changes: Any) -> None:
        self.state.configure(**changes)

    def __enter__(self) -> IamServer:
        self.server = make_server(self.state, "127.0.0.1", 0)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.state.stopping.set()  # delayed answers give up waiting
        self.server.shutdown()
        self.server.server_close()


class RemoteIam:
    """The reading and configuring half of IamServer, for a server running as a process."""

    def __init__(self, url: str):
        self.url = url

    def control(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=START_SECONDS_MAX) as response:
            return json.loads(response.read())["data"]

    @property
    def calls(self) -> int:
        return self.control("GET", "/_test/calls")["authorize"]

    @property
    def catalog_calls(self) -> int:
        return self.control("GET", "/_test/calls")["actions"]

    def requests(self) -> list[ReceivedRequest]:
        return [ReceivedRequest(**request) for request in self.control("GET", "/_test/calls")["requests"]]

    def reset(self) -> None:
        self.control("POST", "/_test/reset", {})

    def configure(self, **changes: Any) -> None:
        self.control("POST", "/_test/configure", changes_as_json(changes))


def changes_as_json(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Only the changed fields, in their JSON form (so the server keeps what was not named)."""
    document = Behaviour().changed(**changes).as_json()
    return {name: document[name] for name in changes}


@contextmanager
def running_iam_server(mode: str = "allow", **behaviour: Any) -> Iterator[RemoteIam]:
    """`python tests/iam_server.py` as a child process, stopped on exit."""
    config = Behaviour.from_json({"mode": mode, **behaviour}).as_json()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(config, file)
    command = [sys.executable, str(Path(__file__).resolve()), "--port", "0", "--config", file.name]
    try:
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            try:
                yield RemoteIam(f"http://127.0.0.1:{announced_port(process)}")
            finally:
                stop(process)
    finally:
        Path(file.name).unlink(missing_ok=True)


def announced_port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.isdigit():
        raise RuntimeError(f"iam_server.py did not print its port (exit status {process.poll()})")
    return int(line)


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=START_SECONDS_MAX)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- static IAM files ---------------------------------------------------------------------------------

class StaticPrincipal(NamedTuple):
    token: str
    principal: str
    tenant: str
    statements: Sequence[Mapping[str, Any]]  # {"effect", "actions", "resources"}


def statement(effect: str, actions: Sequence[str] = ("*",), resources: Sequence[str] = ("*",)) -> dict[str, Any]:
    return {"effect": effect, "actions": list(actions), "resources": list(resources)}


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except DEL, which TOML wants escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_strings(items: Iterable[str]) -> str:
    return "[" + ", ".join(toml_string(item) for item in items) + "]"


def write_static_iam(path: Path | str, principals: Iterable[StaticPrincipal | tuple[str, str, str, Sequence[Mapping[str, Any]]]],
                     actions: Iterable[str] | None = None, hashed: bool = True) -> Path:
    """A static IAM TOML file: each principal's token as `token_sha256` (or plain when not hashed),
    its tenant and statements; `actions` is the file's catalog (absent when None)."""
    lines = [] if actions is None else [f"actions = {toml_strings(actions)}", ""]
    for entry in principals:
        token, principal, tenant, statements = StaticPrincipal(*entry)
        credential = (f"token_sha256 = {toml_string(hashlib.sha256(token.encode()).hexdigest())}" if hashed
                      else f"token = {toml_string(token)}")
        lines += ["[[principals]]", f"principal = {toml_string(principal)}", f"tenant = {toml_string(tenant)}",
                  credential, ""]
        for item in statements:
            lines += ["[[principals.statements]]", f"effect = {toml_string(item['effect'])}",
                      f"actions = {toml_strings(item['actions'])}", f"resources = {toml_strings(item['resources'])}", ""]
    path = Path(path)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# --- as a process -------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Better IAM stand-in for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--config", type=Path, help="a JSON file of Behaviour fields")
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--delay", type=float)
    parser.add_argument("--trickle", type=float)
    parser.add_argument("--deny-action", action="append", dest="deny_actions", help="a glob; repeatable")
    parser.add_argument("--action", action="append", dest="catalog", help="a catalog action; repeatable")
    parser.add_argument("--service-token")
    args = parser.parse_args(argv)
    document = json.loads(args.config.read_text()) if args.config else {}
    document |= {name: value for name, value in vars(args).items()
                 if name not in ("host", "port", "config") and value is not None}
    state = IamState(Behaviour.from_json(document))
    server = make_server(state, args.host, args.port)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        state.stopping.set()
        server.server_close()


if __name__ == "__main__":
    main()
