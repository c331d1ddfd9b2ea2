"""The IAM port (docs/architecture.md §7, P7, P11): the one authorization decision an admission makes.

The relay asks the port once per request with what `api.prepare` answered (tenant, action and
resource `{type, id}`; the attributes it also answers are not the port's: no adapter decides on
them) and hands the `Decision` to `api.admit` / `api.read`, which audit it. The
port never interprets a credential beyond what its adapter needs, and it fails closed: `authorize`
never raises, every failure (timeout, transport error, error envelope, unknown answer) is a deny
whose reason says why; `initialize` raises when the catalog lacks an action the relay serves, or
when the catalog cannot be read at all, so a relay never starts half-authorized.

Adapters:

- `StaticIam` (the embedded default): a TOML or JSON file of principals, each a bearer token (its
  SHA-256, or the plain token for demos), a tenant and policy statements `{effect, actions,
  resources}` whose globs know `*` and `?` only. Explicit deny wins over any allow. The file's
  optional top-level `actions` list is its catalog; without one, `initialize` accepts an action
  when at least one statement's action glob matches it (so a typo in the method table that no
  statement covers still fails start-up).
- `BetterIam`: Better IAM over HTTP, only routes its server serves (repository
  Better-IAM/better-iam, `packages/server/src/http.ts`; every call a POST under the base URL, which
  includes Better IAM's base path, `/api/iam` by default, with `Content-Type: application/json`,
  `X-Better-IAM: 1` and `Authorization: Bearer`; answers `{data}` or `{error: {code, message}}`):
  - `POST {base}/authorize` with the caller's credential and `{tenantId, action, resource: {type,
    id}}`, the only fields its dispatcher reads: the attributes `api.prepare` answers never reach
    Better IAM's policies this way (they reach them through its `resolveResource` hook, which calls
    our `api.resolve`). Answered `{data: {allowed, reason, matched: []}}`
    (`packages/server/src/operations.ts`, `recordedDecision`): reason `allowed`, or `ACCESS_DENIED`
    for every deny, an action outside the tenant's catalog included; no principal, so our audit
    rows name none.
  - `POST {base}/actions/list` with `{tenantId}` for `initialize` (`packages/server/src/api/catalog.ts`,
    `actions.list`): an operation in that tenant needing `iam:actions:read`, so it is read with the
    relay's own service credential (a service account's API key) in the service account's tenant.
    It answers the whole catalog at once (no paging), `[{name, source, resourceType?}]`: `platform`
    actions (declared in the deployment's `permissions`, known in every tenant) and the tenant's
    own. The relay serves every tenant, so only `platform` actions count.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

ANSWER_BYTES_MAX = 65536  # an /authorize answer (docs/architecture.md §14)
CATALOG_BYTES_MAX = 1048576  # the /actions/list answer: every action the catalog tenant may name
POLICY_FILE_BYTES_MAX = 1048576
DEFAULT_TIMEOUT_SECONDS = 2.0
ERROR_CODE_CHARS_MAX = 64  # of a code quoted in a reason (the reason is audited)


@dataclass(frozen=True)
class AuthorizeRequest:
    tenant_id: str
    action: str  # e.g. "compute:reservations:create"
    resource_type: str  # e.g. "compute-reservation"
    resource_id: str  # a uuid, or "*" for lists

    @property
    def resource(self) -> str:
        """The string resource globs match: `{resource_type}/{resource_id}` (Better IAM's form too)."""
        return f"{self.resource_type}/{self.resource_id}"

    def authorize_body(self) -> dict[str, Any]:
        """Better IAM's authorize body: exactly what `http.ts` dispatch('authorize') reads."""
        return {"tenantId": self.tenant_id, "action": self.action,
                "resource": {"type": self.resource_type, "id": self.resource_id}}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AuthorizeRequest:
        """The request `api.prepare` answered under `iam` (trusted: it comes from our database); its
        `attributes` are left out, no adapter decides on them."""
        return cls(str(document["tenantId"]), document["action"], document["resource"]["type"],
                   str(document["resource"]["id"]))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    matched: list[Any]  # matched statements (JSON values)
    principal: str | None

    def as_json(self) -> dict[str, Any]:
        """The decision as `api.admit` and `api.read` take it."""
        return {"allowed": self.allowed, "reason": self.reason, "matched": list(self.matched),
                "principal": self.principal}

    @classmethod
    def deny(cls, reason: str, principal: str | None = None, matched: Sequence[Any] = ()) -> Decision:
        return cls(False, reason, list(matched), principal)


class IamPort(Protocol):
    async def initialize(self, actions: Iterable[str]) -> None:
        """Check that the IAM catalog knows every action; raise IamCatalogError naming every missing
        one, or IamUnavailableError when the catalog cannot be read (P11: fail closed at start-up)."""

    async def authorize(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        """Decide once; never raise: any failure is a deny that says why (P11)."""

    def tenant_of(self, credential: str | None) -> str | None:
        """The tenant a credential belongs to when the port knows it locally (static), else None."""

    async def aclose(self) -> None:
        """Release connections."""


class IamError(Exception):
    """Start-up failures of the IAM port; `authorize` never raises them."""


class IamConfigError(IamError):
    """A static IAM file that cannot be used as it is."""


class IamUnavailableError(IamError):
    """The IAM catalog could not be read (transport, timeout, error envelope, unknown answer)."""


class IamCatalogError(IamError):
    def __init__(self, missing: Iterable[str]):
        self.missing = sorted(set(missing))
        super().__init__(f"the IAM catalog lacks {len(self.missing)} action(s) the API serves: "
                         + ", ".join(self.missing))


def missing_actions(actions: Iterable[str], known: Callable[[str], bool]) -> list[str]:
    """The actions `known(action)` rejects, each once, in the order given."""
    return list(dict.fromkeys(action for action in actions if not known(action)))


# --- globs -------------------------------------------------------------------------------------------

def compile_glob(glob: str) -> re.Pattern[str]:
    """`*` any run of characters (`:` and `/` included), `?` one character, everything else itself:
    unlike fnmatch, `[` is literal, so a statement never grows a character class by accident."""
    parts = (".*" if char == "*" else "." if char == "?" else re.escape(char) for char in glob)
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True)
class Glob:
    text: str
    pattern: re.Pattern[str]

    @classmethod
    def of(cls, text: str) -> Glob:
        return cls(text, compile_glob(text))

    def matches(self, value: str) -> bool:
        return self.pattern.fullmatch(value) is not None


# --- static ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    index: int
    effect: str  # "allow" | "deny"
    actions: tuple[Glob, ...]
    resources: tuple[Glob, ...]

    def matches(self, request: AuthorizeRequest) -> bool:
        return (any(glob.matches(request.action) for glob in self.actions)
                and any(glob.matches(request.resource) for glob in self.resources))

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "effect": self.effect, "actions": [glob.text for glob in self.actions],
                "resources": [glob.text for glob in self.resources]}


@dataclass(frozen=True)
class Principal:
    name: str
    tenant: str  # canonical uuid text
    token_sha256: bytes
    statements: tuple[Statement, ...]


class StaticIam:
    """Principals and their statements from a file, decided in process (the embedded default)."""

    def __init__(self, principals: Sequence[Principal], catalog: frozenset[str] | None):
        self.principals = tuple(principals)
        self.catalog = catalog

    @classmethod
    def load(cls, path: str | Path) -> StaticIam:
        """Read and validate a `.toml` or `.json` file; IamConfigError names the bad entry."""
        path = Path(path)
        if path.suffix not in (".toml", ".json"):
            raise IamConfigError(f"{path}: a static IAM file is .toml or .json")
        raw = read_bounded(path)
        try:
            document = tomllib.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as error:
            raise IamConfigError(f"{path}: {error}") from error
        return parse_static(document, str(path))

    async def initialize(self, actions: Iterable[str]) -> None:
        missing = missing_actions(actions, self.knows)
        if missing:
            raise IamCatalogError(missing)

    def knows(self, action: str) -> bool:
        """In the file's catalog; without one, matched by some statement's action glob."""
        if self.catalog is not None:
            return action in self.catalog
        return any(glob.matches(action) for principal in self.principals
                   for statement in principal.statements for glob in statement.actions)

    async def authorize(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        return self.decide(credential, request)

    def decide(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        principal = self.principal_of(credential)
        if principal is None:
            return Decision.deny("no credential" if not credential else "unknown credential")
        if canonical_tenant(request.tenant_id) != principal.tenant:
            return Decision.deny(f"credential is not of tenant {request.tenant_id}", principal.name)
        matched = [statement for statement in principal.statements if statement.matches(request)]
        documents = [statement.as_json() for statement in matched]
        denying = [statement.index for statement in matched if statement.effect == "deny"]
        if denying:
            return Decision.deny(f"explicit deny (statement {denying[0]})", principal.name, documents)
        if matched:
            return Decision(True, f"allowed by statement {matched[0].index}", documents, principal.name)
        return Decision.deny("no statement allows", principal.name)

    def principal_of(self, credential: str | None) -> Principal | None:
        """Compare the credential's hash with every principal's in constant time per comparison, and
        with all of them, so the answer time does not tell which principal came close."""
        if not credential:
            return None
        digest = hashlib.sha256(credential.encode()).digest()
        found = None
        for principal in self.principals:
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        return found

    def tenant_of(self, credential: str | None) -> str | None:
        principal = self.principal_of(credential)
        return principal.tenant if principal else None

    async def aclose(self) -> None:
        """Nothing to release: the file was read at load."""


def read_bounded(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            raw = file.read(POLICY_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise IamConfigError(f"{path}: {error.strerror or error}") from error
    if len(raw) > POLICY_FILE_BYTES_MAX:
        raise IamConfigError(f"{path}: larger than {POLICY_FILE_BYTES_MAX} bytes")
    return raw


def canonical_tenant(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except (ValueError, TypeError, AttributeError):
        return None


def parse_static(document: Any, source: str) -> StaticIam:
    """Validate the whole document strictly: an unknown key or a wrong type is an error naming where,
    because a policy file that half-loads grants or denies something nobody wrote."""
    where = Where(source)
    table = where.table(document, {"principals", "actions"}, required={"principals"})
    catalog = None
    if "actions" in table:
        catalog = frozenset(where.at("actions").strings(table["actions"]))
    entries = where.at("principals").items(table["principals"])
    principals = [parse_principal(entry, where.at(f"principals[{number}]")) for number, entry in enumerate(entries)]
    seen: dict[bytes, str] = {}
    for principal in principals:
        if principal.token_sha256 in seen:
            raise IamConfigError(f"{source}: principals {seen[principal.token_sha256]!r} and {principal.name!r} "
                                 "have the same token")
        seen[principal.token_sha256] = principal.name
    return StaticIam(principals, catalog)


def parse_principal(entry: Any, where: Where) -> Principal:
    table = where.table(entry, {"principal", "tenant", "token", "token_sha256", "statements"},
                        required={"principal", "tenant", "statements"})
    name = where.at("principal").string(table["principal"])
    tenant = canonical_tenant(where.at("tenant").string(table["tenant"]))
    if tenant is None:
        raise where.at("tenant").error("must be a uuid")
    statements = [parse_statement(statement, where.at(f"statements[{index}]"), index)
                  for index, statement in enumerate(where.at("statements").items(table["statements"]))]
    return Principal(name, tenant, parse_token(table, where), tuple(statements))


def parse_token(table: Mapping[str, Any], where: Where) -> bytes:
    """`token_sha256` (hex) or the plain `token`; both are allowed only when they agree."""
    digests = []
    if "token_sha256" in table:
        text = where.at("token_sha256").string(table["token_sha256"])
        if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
            raise where.at("token_sha256").error("must be 64 hex digits (the SHA-256 of the token)")
        digests.append(bytes.fromhex(text))
    if "token" in table:
        digests.append(hashlib.sha256(where.at("token").string(table["token"]).encode()).digest())
    if not digests:
        raise where.error("needs token_sha256 or token")
    if len(digests) == 2 and digests[0] != digests[1]:
        raise where.error("token_sha256 is not the SHA-256 of token")
    return digests[0]


def parse_statement(entry: Any, where: Where, index: int) -> Statement:
    table = where.table(entry, {"effect", "actions", "resources"}, required={"effect", "actions", "resources"})
    effect = where.at("effect").string(table["effect"])
    if effect not in ("allow", "deny"):
        raise where.at("effect").error("must be 'allow' or 'deny'")
    actions = tuple(Glob.of(text) for text in where.at("actions").strings(table["actions"]))
    resources = tuple(Glob.of(text) for text in where.at("resources").strings(table["resources"]))
    return Statement(index, effect, actions, resources)


@dataclass(frozen=True)
class Where:
    """A position in the static file, for errors that say exactly which entry is wrong."""

    source: str
    path: str = ""

    def at(self, key: str) -> Where:
        """`principals` + `[0]` is `principals[0]`; `principals[0]` + `tenant` is `principals[0].tenant`."""
        separator = "" if not self.path or key.startswith("[") else "."
        return Where(self.source, f"{self.path}{separator}{key}")

    def error(self, message: str) -> IamConfigError:
        return IamConfigError(f"{self.source}: {self.path or 'top level'}: {message}")

    def table(self, value: Any, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.error("must be a table")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.error(f"unknown key(s) {', '.join(unknown)}")
        absent = sorted(required - set(value))
        if absent:
            raise self.error(f"missing {', '.join(absent)}")
        return value

    def string(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.error("must be a non-empty string")
        return value

    def items(self, value: Any) -> list[Any]:
        if not isinstance(value, list) or not value:
            raise self.error("must be a non-empty list")
        return value

    def strings(self, value: Any) -> list[str]:
        return [self.at(f"[{index}]").string(item) for index, item in enumerate(self.items(value))]


# --- Better IAM --------------------------------------------------------------------------------------

class BetterIam:
    """Better IAM over HTTP; one `POST /authorize` per decision, bounded in time and answer size."""

    def __init__(self, base_url: str, service_credential: str, catalog_tenant: str,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS):
        """`base_url` includes Better IAM's base path (`https://iam.example/api/iam`); the service
        credential holds `iam:actions:read` in `catalog_tenant`, where the catalog is read."""
        if httpx.URL(base_url).scheme not in ("http", "https") or not httpx.URL(base_url).host:
            raise IamConfigError(f"{base_url!r} is not an http(s) URL")  # at start-up, not a deny per request
        if not catalog_tenant:
            raise IamConfigError("BetterIam needs the Better IAM tenant of the service credential (the catalog's)")
        self.base_url = base_url.rstrip("/")
        self.service_credential = service_credential
        self.catalog_tenant = catalog_tenant
        self.timeout = timeout
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def initialize(self, actions: Iterable[str]) -> None:
        catalog = await self.catalog()
        missing = missing_actions(actions, catalog.__contains__)
        if missing:
            raise IamCatalogError(missing)

    async def catalog(self) -> frozenset[str]:
        """The platform actions of `POST {base}/actions/list` in the catalog tenant (module docstring)."""
        url = f"{self.base_url}/actions/list"
        try:
            status, raw = await self.exchange(url, self.service_credential, {"tenantId": self.catalog_tenant},
                                              CATALOG_BYTES_MAX)
        except (TimeoutError, httpx.HTTPError, AnswerTooLarge) as error:
            raise IamUnavailableError(f"{url}: {describe(error)}") from error
        answer = parse_json(raw)
        entries = dig(answer, "data")
        if is_success(status) and isinstance(entries, list) and all(map(is_catalog_entry, entries)):
            return frozenset(entry["name"] for entry in entries if entry["source"] == "platform")
        code = error_code(answer)
        raise IamUnavailableError(f"{url}: " + (f"iam error: {code}" if code else f"unknown answer (HTTP {status})"))

    async def authorize(self, credential: str | None, request: AuthorizeRequest) -> Decision:
        """Without a credential there is nobody to ask about: deny here rather than send an
        anonymous request whose answer could only be UNAUTHENTICATED."""
        if not credential:
            return Decision.deny("no credential")
        try:
            status, raw = await self.exchange(f"{self.base_url}/authorize", credential, request.authorize_body(),
                                              ANSWER_BYTES_MAX)
        except (TimeoutError, httpx.TimeoutException):
            return Decision.deny("iam timeout")
        except AnswerTooLarge:
            return Decision.deny(f"iam answer larger than {ANSWER_BYTES_MAX} bytes")
        except httpx.HTTPError as error:
            return Decision.deny(f"iam unreachable: {type(error).__name__}")
        except Exception as error:  # the contract is a decision, never an exception (P11)
            return Decision.deny(f"iam request failed: {type(error).__name__}")
        return decision_of(status, raw)

    async def exchange(self, url: str, credential: str, body: Any, limit: int) -> tuple[int, bytes]:
        """One POST under one overall deadline (httpx's timeout is per read, so a server that trickles
        bytes would otherwise hold the caller forever); the answer is read up to `limit`. Better IAM
        takes a POST only as JSON with `X-Better-IAM: 1` (else CSRF_REJECTED)."""
        headers = {"X-Better-IAM": "1", "Authorization": f"Bearer {credential}", "Accept": "application/json",
                   "Accept-Encoding": "identity"}  # raw bytes: a compressed answer could not be bounded
        async with asyncio.timeout(self.timeout):
            async with self.client.stream("POST", url, json=body, headers=headers) as response:
                raw = bytearray()
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if len(raw) > limit:
                        raise AnswerTooLarge(limit)
                return response.status_code, bytes(raw)

    def tenant_of(self, credential: str | None) -> str | None:
        """Better IAM keeps credentials to itself: the tenant comes from the request."""
        return None

    async def aclose(self) -> None:
        await self.client.aclose()


class AnswerTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"answer larger than {limit} bytes")


def describe(error: BaseException) -> str:
    if isinstance(error, (TimeoutError, httpx.TimeoutException)):
        return "timeout"
    return str(error) or type(error).__name__


def is_success(status: int) -> bool:
    return 200 <= status < 300


def parse_json(raw: bytes) -> Any:
    """The JSON value, or None for anything that is not JSON (every caller treats None as unknown)."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def error_code(answer: Any) -> str | None:
    code = dig(answer, "error", "code")
    return code[:ERROR_CODE_CHARS_MAX] if isinstance(code, str) and code else None


def is_catalog_entry(entry: Any) -> bool:
    """An `actions.list` item: `{name, source, ...}` with a string name and a string source."""
    return isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("source"), str)


def decision_of(status: int, raw: bytes) -> Decision:
    """Only a 2xx `{data}` with exactly the expected types can allow; anything else denies. Better
    IAM names no principal."""
    answer = parse_json(raw)
    if answer is None:
        return Decision.deny(f"iam answered non-JSON (HTTP {status})")
    code = error_code(answer)
    if code is not None:
        return Decision.deny(f"iam error: {code}")
    data = dig(answer, "data")
    if not is_success(status) or not isinstance(data, dict):
        return Decision.deny(f"iam answered an unknown document (HTTP {status})")
    allowed, reason, matched = data.get("allowed"), data.get("reason"), data.get("matched")
    if not isinstance(allowed, bool) or not isinstance(reason, str) or not isinstance(matched, list):
        return Decision.deny(f"iam answered an unknown document (HTTP {status})")
    return Decision(allowed, reason, matched, None)
