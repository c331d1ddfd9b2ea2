"""A Better IAM stand-in for tests, and the writer of static IAM files.

`IamServer` is a real HTTP server on 127.0.0.1 (a ThreadingHTTPServer in a thread) that serves the part
of Better IAM's HTTP surface the relay uses, as Better IAM serves it, and nothing more. What Better
IAM serves was read from its server (repository Better-IAM/better-iam):

- `packages/server/src/http.ts`, `createHttp().handler`: everything lives under the base path
  (`/api/iam` by default; any other path is 404 NOT_FOUND). GET serves only `{base}/health`,
  `{base}/metrics` (with a configured metrics token) and `{base}/.well-known/jwks.json` (with session
  JWTs); any other GET is 404 NOT_FOUND. OPTIONS is a 204 preflight, every other method but POST is
  405 METHOD_NOT_ALLOWED. A POST without `Content-Type: application/json` and `X-Better-IAM: 1` is
  403 CSRF_REJECTED, a body over 64 KiB 413 PAYLOAD_TOO_LARGE, a body that is not a JSON object 400
  INVALID_INPUT, a route it does not know 404 NOT_FOUND. Answers are `{data}` or
  `{error: {code, message}}` with the error's status.
- `dispatch('authorize')` (same file) reads `tenantId`, `action`, `resource.type` and `resource.id`,
  and nothing else of the body (each a non-blank string of at most 256 characters without control
  characters, `packages/server/src/validation.ts`, else 400 INVALID_INPUT); the credential is
  `Authorization: Bearer` (none, or one it does not know: 401 UNAUTHENTICATED).
  `packages/server/src/operations.ts` `recordedDecision` answers `{allowed, reason, matched: []}`: the
  reason is `allowed` on an allow and `ACCESS_DENIED` on every deny (an action outside the catalog,
  a credential of another tenant, no grant); no principal.
- `actions/list` (`packages/server/src/api/catalog.ts`, `createActionsApi().list`): `{tenantId}`, an
  operation that needs `iam:actions:read` in that tenant (401 UNAUTHENTICATED, 403 ACCESS_DENIED),
  answered with the whole catalog at once (no paging): `[{name, source: "platform" | "tenant",
  resourceType?}]`, the platform's actions (declared in the deployment's `permissions`, known in
  every tenant) and the tenant's own.
- `billing/record` (`packages/server/src/api/billing.ts`, `createBillingApi().record`, the ledger
  adapter's route): the meter key is checked first (`meterKey`, `packages/server/src/billing.ts`:
  `^[a-z][a-z0-9_.-]{0,63}$`, else 400 INVALID_INPUT), then an operation that needs
  `iam:billing:record` on `iam/billing/meters/{meter}` in `tenantId` (401, 403), then
  `packages/server/src/billing-service.ts` `record`: a meter that does not reach the tenant is 404
  NOT_FOUND; `quantity` a number from 0 to 1e15 (default 1), `cost` refused on a rate-card meter,
  `occurredAt` epoch milliseconds (default now) at most five minutes ahead and at most 366 days
  back, `idempotencyKey` text of at most 200 characters, `tags` at most 10 `{name: text of at most
  128}` (all 400 INVALID_INPUT). A key already used in the tenant records nothing and answers the
  first receipt with `duplicate: true` (409 CONFLICT when that was another meter). The receipt is
  `{id, tenantId, meter, quantity, period, occurredAt, teamIds: [], duplicate}`, `period` the
  month of `occurredAt` (billing time zone UTC, the default). Its clock is `now` (epoch seconds;
  None: the wall clock), as Better IAM's injected clock is.

It keeps every request it receives (refused ones too), counts the routes and keeps the usage it
recorded, so a test can check "exactly one decision" and that nothing else was asked; the controls
are methods of the object, never routes:

    with IamServer(mode="allow", catalog=actions) as iam:
        ... iam.url (the base, path included), iam.calls, iam.catalog_calls, iam.usage(),
            iam.requests(), iam.reset(), iam.configure(mode="deny")

Only the standard library is used.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import math
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

MODES = ("allow", "deny", "policy", "error", "garbage")
BASE_PATH = "/api/iam"  # Better IAM's default basePath
AUTHORIZE = f"{BASE_PATH}/authorize"
ACTIONS_LIST = f"{BASE_PATH}/actions/list"
BILLING_RECORD = f"{BASE_PATH}/billing/record"
HEALTH = f"{BASE_PATH}/health"
BODY_BYTES_MAX = 65536  # http.ts: limitedBody(request, 65536)
TEXT_CHARS_MAX = 256  # validation.ts: text(value, name, max = 256)
METER_KEY = re.compile(r"[a-z][a-z0-9_.-]{0,63}")  # billing.ts meterKey
TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")  # billing.ts usageTags
TAGS_MAX, TAG_CHARS_MAX, IDEMPOTENCY_KEY_CHARS_MAX = 10, 128, 200
QUANTITY_MAX = 1e15
AHEAD_MS_MAX, BACK_MS_MAX = 300_000, 366 * 86_400_000  # billing-service.ts record: occurredAt bounds
SAFE_INTEGER_MAX = 2**53 - 1


@dataclass(frozen=True)
class TokenPolicy:
    """What one bearer token may do in mode "policy": its tenant (None: any) and action globs."""

    tenant: str | None = None
    actions: tuple[str, ...] = ("*",)


@dataclass(frozen=True)
class Behaviour:
    """How the server answers.

    mode: "allow" everything, "deny" everything, "policy" (per token, `policies`: any other token is
    unknown, 401), "error" (the error envelope `error_code` with `error_status`), "garbage"
    (`garbage` with `garbage_status`); "error" and "garbage" answer every route so. In "allow" and
    "deny" every bearer token is known. In every deciding mode an action matching a `deny_actions`
    glob is denied, and, when `catalog` is set, an action outside it is denied as Better IAM does
    (its own `iam:*` actions are always in its catalog). `actions/list` answers `catalog` as
    platform actions (none when None) and `tenant_actions` as the tenant's own; it needs
    `service_token` when that is set (another known token lacks `iam:actions:read`: 403) and the
    tenant `service_tenant` when that is set. `billing/record` knows the rate-card meters `meters`
    (defined on the root, reaching every tenant), decides `iam:billing:record` as `authorize`
    decides, and reads the time from `now`. `delay` seconds pass before a route answers, and with
    `trickle` the body goes one byte every `trickle` seconds (timeout tests: each read is quick,
    the whole answer is not).
    """

    mode: str = "allow"
    deny_actions: tuple[str, ...] = ()
    policies: Mapping[str, TokenPolicy] = field(default_factory=dict)
    catalog: tuple[str, ...] | None = None
    tenant_actions: tuple[str, ...] = ()
    service_token: str | None = None
    service_tenant: str | None = None
    meters: tuple[str, ...] = ("gpu_seconds",)
    now: float | None = None
    delay: float = 0.0
    trickle: float = 0.0
    error_code: str = "INTERNAL_ERROR"
    error_status: int = 500
    garbage: str = "<html>not the envelope</html>"
    garbage_status: int = 200

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        for name in ("deny_actions", "catalog", "tenant_actions", "meters"):  # lists given by a test become tuples
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def knows(self, token: str | None) -> bool:
        """Whether Better IAM would authenticate this bearer token."""
        if not token:
            return False
        return self.mode != "policy" or token in self.policies or token == self.service_token


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lowercased
    body: Any  # the JSON value, or None when there was none or it was not JSON

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    trickle: float = 0.0  # seconds between the body's bytes

    @classmethod
    def data(cls, value: Any) -> Reply:
        return cls(200, json.dumps({"data": value}).encode())

    @classmethod
    def error(cls, status: int, code: str, message: str) -> Reply:
        return cls(status, json.dumps({"error": {"code": code, "message": message}}).encode())


class Refused(Exception):
    """An error answer, raised where Better IAM throws its IamError."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.reply = Reply.error(status, code, message)


def bearer(request: ReceivedRequest) -> str | None:
    value = request.header("authorization") or ""
    return value[len("Bearer "):] if value.startswith("Bearer ") else None


def text(value: Any, name: str, chars_max: int = TEXT_CHARS_MAX) -> str:
    """validation.ts `text`: a non-blank string of at most `chars_max` characters without control characters."""
    if (not isinstance(value, str) or not value.strip() or len(value) > chars_max
            or any(ord(char) < 0x20 for char in value)):
        raise Refused(400, "INVALID_INPUT", f"Invalid {name}")
    return value


def authorize_data(behaviour: Behaviour, request: ReceivedRequest) -> dict[str, Any]:
    """http.ts dispatch('authorize') and operations.ts authorize: validate, authenticate, decide."""
    body = request.body
    resource = body.get("resource")
    if not isinstance(resource, dict):
        raise Refused(400, "INVALID_INPUT", "Expected an object")
    tenant, action = text(body.get("tenantId"), "tenantId"), text(body.get("action"), "action")
    text(resource.get("type"), "resource type")
    text(resource.get("id"), "resource id")
    token = bearer(request)
    if not behaviour.knows(token):
        raise Refused(401, "UNAUTHENTICATED", "Authentication required")
    allowed = decides_allow(behaviour, token, tenant, action)
    return {"allowed": allowed, "reason": "allowed" if allowed else "ACCESS_DENIED", "matched": []}


def decides_allow(behaviour: Behaviour, token: str | None, tenant: str, action: str) -> bool:
    if behaviour.catalog is not None and action not in behaviour.catalog and not action.startswith("iam:"):
        return False  # decisions.ts: UNKNOWN_ACTION, answered as ACCESS_DENIED
    if any(fnmatch.fnmatchcase(action, glob) for glob in behaviour.deny_actions) or behaviour.mode == "deny":
        return False
    if behaviour.mode == "policy":
        policy = behaviour.policies.get(token or "")
        return (policy is not None and policy.tenant in (None, tenant)
                and any(fnmatch.fnmatchcase(action, glob) for glob in policy.actions))
    return True


def actions_list_data(behaviour: Behaviour, request: ReceivedRequest) -> list[dict[str, Any]]:
    """api/catalog.ts actions.list inside operations.ts `operation`: authenticate, authorize
    `iam:actions:read` in the tenant, answer the platform's actions and the tenant's."""
    token = bearer(request)
    if not behaviour.knows(token):
        raise Refused(401, "UNAUTHENTICATED", "Authentication required")
    tenant = request.body.get("tenantId")
    if ((behaviour.service_token is not None and token != behaviour.service_token)
            or (behaviour.service_tenant is not None and tenant != behaviour.service_tenant)):
        raise Refused(403, "ACCESS_DENIED", "Access denied")
    return ([{"name": name, "source": "platform"} for name in behaviour.catalog or ()]
            + [{"name": name, "source": "tenant", "resourceType": name.split(":")[0]}
               for name in behaviour.tenant_actions])


class UsageBook:
    """The usage `billing/record` recorded, by tenant and `idem:{idempotencyKey}`, as billing-service.ts
    keeps it; shared by the handler threads (one lock: a repeated key records nothing)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.by_key: dict[tuple[str, str], dict[str, Any]] = {}

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(item) for item in self.records]

    def record(self, behaviour: Behaviour, request: ReceivedRequest) -> dict[str, Any]:
        """api/billing.ts `record`: meter key, the operation's authentication and decision, then
        billing-service.ts `record` (module docstring)."""
        body = request.body
        meter = body.get("meter")
        if not isinstance(meter, str) or not METER_KEY.fullmatch(meter):
            raise Refused(400, "INVALID_INPUT", "meter must be 1-64 lowercase letters, digits, dots, underscores "
                                                "or hyphens, starting with a letter")
        token = bearer(request)
        if not behaviour.knows(token):
            raise Refused(401, "UNAUTHENTICATED", "Authentication required")
        tenant = text(body.get("tenantId"), "tenantId")
        if not decides_allow(behaviour, token, tenant, "iam:billing:record"):
            raise Refused(403, "ACCESS_DENIED", "Access denied")
        if meter not in behaviour.meters:
            raise Refused(404, "NOT_FOUND", f"Unknown billing meter {meter}")
        entry = {"tenantId": tenant, "meter": meter, "quantity": usage_quantity(body.get("quantity", 1))}
        if "cost" in body:
            raise Refused(400, "INVALID_INPUT", "This meter is priced from the rate card; leave cost out")
        now = int((time.time() if behaviour.now is None else behaviour.now) * 1000)
        entry["occurredAt"] = occurred_at(body.get("occurredAt", now), now)
        key = None if body.get("idempotencyKey") is None else text(body["idempotencyKey"], "idempotencyKey",
                                                                  IDEMPOTENCY_KEY_CHARS_MAX)
        with self.lock:
            existing = None if key is None else self.by_key.get((tenant, key))
            if existing is not None:
                if existing["meter"] != meter:
                    raise Refused(409, "CONFLICT", "This idempotency key was used for another meter")
                return receipt(existing, duplicate=True)
            tags = usage_tags(body.get("tags"))
            stored = entry | {"id": f"u_{len(self.records) + 1}", "idempotencyKey": key,
                              **({"tags": tags} if tags else {})}
            self.records.append(stored)
            if key is not None:
                self.by_key[(tenant, key)] = stored
            return receipt(stored, duplicate=False)


def usage_quantity(value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 <= value <= QUANTITY_MAX):
        raise Refused(400, "INVALID_INPUT", "quantity must be a number from 0 to 1e15")
    return value


def occurred_at(value: Any, now: int) -> int:
    """validation.ts `integer(value, 'occurredAt', 0, MAX_SAFE_INTEGER)`, then record's bounds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SAFE_INTEGER_MAX:
        raise Refused(400, "INVALID_INPUT", "occurredAt must be an integer")
    if value > now + AHEAD_MS_MAX:
        raise Refused(400, "INVALID_INPUT", "occurredAt must not be in the future")
    if value < now - BACK_MS_MAX:
        raise Refused(400, "INVALID_INPUT", "occurredAt must be within the last year")
    return value


def usage_tags(value: Any) -> dict[str, str]:
    """billing.ts `usageTags`: at most 10, names like `project`, values text of at most 128."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(400, "INVALID_INPUT", "Expected an object")
    if len(value) > TAGS_MAX:
        raise Refused(400, "INVALID_INPUT", "tags may hold at most 10 entries")
    for name, tag in value.items():
        if not TAG_NAME.fullmatch(name):
            raise Refused(400, "INVALID_INPUT", f"Invalid tag name {name}")
        text(tag, f"tags.{name}", TAG_CHARS_MAX)
    return dict(sorted(value.items()))


def receipt(stored: Mapping[str, Any], duplicate: bool) -> dict[str, Any]:
    """billing-service.ts `receipt`; the period in UTC, Better IAM's default billing time zone."""
    period = time.strftime("%Y-%m", time.gmtime(stored["occurredAt"] / 1000))
    return {"id": stored["id"], "tenantId": stored["tenantId"], "meter": stored["meter"], "quantity": stored["quantity"],
            "period": period, "occurredAt": stored["occurredAt"], "teamIds": [], "duplicate": duplicate}


ROUTES = {AUTHORIZE: authorize_data, ACTIONS_LIST: actions_list_data}


def surface_refusal(request: ReceivedRequest) -> Reply | None:
    """What http.ts answers before any route runs, in its order; None for a POST it dispatches."""
    if not request.path.startswith(f"{BASE_PATH}/"):
        return Reply.error(404, "NOT_FOUND", "Not found")
    if request.method == "OPTIONS":
        return Reply(204, b"")
    if request.method == "GET":
        if request.path == HEALTH:
            return Reply(200, json.dumps({"status": "ok", "database": "ok", "latencyMs": 0,
                                          "time": int(time.time() * 1000)}).encode())
        return Reply.error(404, "NOT_FOUND", "Endpoint not found")
    if request.method != "POST":
        return Reply.error(405, "METHOD_NOT_ALLOWED", "Use POST")
    if (not (request.header("content-type") or "").lower().startswith("application/json")
            or request.header("x-better-iam") != "1"):
        return Reply.error(403, "CSRF_REJECTED", "JSON and X-Better-IAM header required")
    if not isinstance(request.body, dict):
        return Reply.error(400, "INVALID_INPUT", "Invalid JSON")
    if request.path not in ROUTES and request.path != BILLING_RECORD:
        return Reply.error(404, "NOT_FOUND", "Endpoint not found")
    return None


class IamState:
    """The behaviour and the received requests, shared by the handler threads."""

    def __init__(self, behaviour: Behaviour):
        self.lock = threading.Lock()
        self.behaviour = behaviour
        self.received: list[ReceivedRequest] = []
        self.usage = UsageBook()
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

    def configure(self, **changes: Any) -> None:
        with self.lock:
            self.behaviour = dataclasses.replace(self.behaviour, **changes)

    def count(self, path: str) -> int:
        return sum(1 for request in self.snapshot() if (request.method, request.path) == ("POST", path))

    def answer(self, request: ReceivedRequest) -> Reply:
        """Recorded; refused as Better IAM's surface refuses; else delayed, then answered."""
        behaviour = self.record(request)
        refusal = surface_refusal(request)
        if refusal is not None:
            return refusal
        self.stopping.wait(behaviour.delay)
        return dataclasses.replace(route_reply(behaviour, request, self.usage), trickle=behaviour.trickle)


def route_reply(behaviour: Behaviour, request: ReceivedRequest, usage: UsageBook) -> Reply:
    if behaviour.mode == "error":
        return Reply.error(behaviour.error_status, behaviour.error_code, "the test server answers an error")
    if behaviour.mode == "garbage":
        return Reply(behaviour.garbage_status, behaviour.garbage.encode())
    try:
        if request.path == BILLING_RECORD:
            return Reply.data(usage.record(behaviour, request))
        return Reply.data(ROUTES[request.path](behaviour, request))
    except Refused as refused:
        return refused.reply


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

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

        def serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > BODY_BYTES_MAX:
                self.close_connection = True  # the body stays unread
                self.send(Reply.error(413, "PAYLOAD_TOO_LARGE", "Request body too large"))
                return
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            self.send(state.answer(ReceivedRequest(self.command, urlsplit(self.path).path, headers, body)))

        def send(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
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
        self.state = IamState(Behaviour(mode=mode, **behaviour))
        self.server: QuietServer | None = None

    @property
    def origin(self) -> str:
        assert self.server is not None, "the server is not running"
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        """Better IAM's base URL, what `--iam-url` takes: the origin and the base path."""
        return self.origin + BASE_PATH

    @property
    def calls(self) -> int:
        """POST {base}/authorize requests received since the start or the last reset()."""
        return self.state.count(AUTHORIZE)

    @property
    def catalog_calls(self) -> int:
        """POST {base}/actions/list requests received since the start or the last reset()."""
        return self.state.count(ACTIONS_LIST)

    def usage(self) -> list[dict[str, Any]]:
        """What POST {base}/billing/record recorded (one per tenant and idempotency key), in order:
        the body's tenantId, meter, quantity, occurredAt, idempotencyKey and tags, and the id."""
        return self.state.usage.snapshot()

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
