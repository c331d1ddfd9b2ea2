"""The IAM port: the static adapter decides from its file (explicit deny wins, globs, tenants,
strict loading), the Better IAM adapter against a local server that serves Better IAM's HTTP
surface (tests/iam_server.py) calls only that surface and denies on every failure (timeout, error
envelope, unknown or oversized answer, no server), and both fail initialize() on an action missing
from the catalog (P11). The stand-in itself refuses what Better IAM refuses."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from better_compute.cli.serve import IamKind, make_iam
from better_compute.ports.iam import (
    ANSWER_BYTES_MAX,
    POLICY_FILE_BYTES_MAX,
    AuthorizeRequest,
    BetterIam,
    Decision,
    IamCatalogError,
    IamConfigError,
    IamUnavailableError,
    StaticIam,
)
from iam_server import BASE_PATH, IamServer, ReceivedRequest, StaticPrincipal, TokenPolicy, statement, write_static_iam

TENANT = "00000000-0000-4000-8000-000000000001"
OTHER_TENANT = "00000000-0000-4000-8000-000000000002"
RESERVATION = "7f1c1a52-2a55-4a7e-9d3f-0d6c7b1e9a10"
POOL = "5b0f6c1e-8d2b-4e5f-a1c3-9e8d7f6a5b4c"
SERVICE_TOKEN = "service-credential"
SERVICE_TENANT = "tenant-of-the-relay-service-account"
ALICE = "alice-token"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # BetterIam bounds a request with asyncio.timeout


def request(action: str = "compute:reservations:create", resource_type: str = "compute-reservation",
            resource_id: str = RESERVATION, tenant: str = TENANT) -> AuthorizeRequest:
    return AuthorizeRequest(tenant, action, resource_type, resource_id)


def static_iam(tmp_path: Path, statements: Sequence[dict[str, Any]], actions: Sequence[str] | None = None,
               hashed: bool = True) -> StaticIam:
    """Alice of TENANT with the given statements, loaded from a written TOML file."""
    path = write_static_iam(tmp_path / "iam.toml", [(ALICE, "user:alice", TENANT, statements)], actions, hashed)
    return StaticIam.load(path)


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def alice_document(**changes: Any) -> dict[str, Any]:
    """A valid static document of one principal, with top-level changes for the invalid cases."""
    principal = {"principal": "user:alice", "tenant": TENANT, "token": ALICE,
                 "statements": [statement("allow", ["compute:*"])]}
    return {"principals": [principal], **changes}


@asynccontextmanager
async def better_iam(url: str, timeout: float = 2.0) -> AsyncIterator[BetterIam]:
    port = BetterIam(url, SERVICE_TOKEN, SERVICE_TENANT, timeout=timeout)
    try:
        yield port
    finally:
        await port.aclose()


def free_port() -> int:
    """A port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- static ------------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_allow_statement_allows_and_names_principal_and_statement(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:reservations:*"], ["compute-reservation/*"])])
    decision = await iam.authorize(ALICE, request())
    assert decision == Decision(True, "allowed by statement 0", [
        {"index": 0, "effect": "allow", "actions": ["compute:reservations:*"], "resources": ["compute-reservation/*"]}],
        "user:alice")


@pytest.mark.anyio
async def test_explicit_deny_wins_over_allow(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:*"]),
                                statement("deny", ["compute:reservations:create"]),
                                statement("allow", ["compute:reservations:create"])])
    decision = await iam.authorize(ALICE, request())
    assert (decision.allowed, decision.reason) == (False, "explicit deny (statement 1)")
    assert [matched["index"] for matched in decision.matched] == [0, 1, 2]
    assert (await iam.authorize(ALICE, request("compute:reservations:release"))).allowed


@pytest.mark.anyio
async def test_no_matching_statement_is_a_deny(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:pools:*"])])
    assert await iam.authorize(ALICE, request()) == Decision(False, "no statement allows", [], "user:alice")


@pytest.mark.anyio
async def test_unknown_or_missing_credential_is_denied(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")])
    assert await iam.authorize("mallory-token", request()) == Decision(False, "unknown credential", [], None)
    assert await iam.authorize(None, request()) == Decision(False, "no credential", [], None)
    assert (await iam.authorize("", request())).allowed is False


@pytest.mark.anyio
async def test_credential_of_another_tenant_is_denied(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")])
    decision = await iam.authorize(ALICE, request(tenant=OTHER_TENANT))
    assert decision == Decision(False, f"credential is not of tenant {OTHER_TENANT}", [], "user:alice")
    assert (await iam.authorize(ALICE, request(tenant="not-a-uuid"))).allowed is False


@pytest.mark.anyio
async def test_tenant_is_compared_as_a_uuid(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")])
    assert (await iam.authorize(ALICE, request(tenant=TENANT.upper()))).allowed


@pytest.mark.anyio
async def test_glob_on_resource(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:*"], ["compute-pool/*"]),
                                statement("allow", ["compute:reservations:get"], [f"compute-reservation/{RESERVATION}"])])
    assert (await iam.authorize(ALICE, request("compute:pools:get", "compute-pool", POOL))).allowed
    assert (await iam.authorize(ALICE, request("compute:pools:list", "compute-pool", "*"))).allowed
    assert not (await iam.authorize(ALICE, request("compute:reservations:create"))).allowed
    assert (await iam.authorize(ALICE, request("compute:reservations:get"))).allowed
    listing = await iam.authorize(ALICE, request("compute:reservations:get", resource_id="*"))
    assert not listing.allowed, "a grant on one id is not a grant on the list"


@pytest.mark.anyio
async def test_glob_on_action_knows_star_and_question_mark(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:nodes:?ordon", "compute:*:list"])])
    assert (await iam.authorize(ALICE, request("compute:nodes:cordon", "compute-node"))).allowed
    assert (await iam.authorize(ALICE, request("compute:sites:list", "compute-site", "*"))).allowed
    assert not (await iam.authorize(ALICE, request("compute:nodes:uncordon", "compute-node"))).allowed
    assert not (await iam.authorize(ALICE, request("Compute:sites:list", "compute-site", "*"))).allowed


@pytest.mark.anyio
async def test_brackets_in_a_glob_are_literal(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:[a-z]*"])])
    assert not (await iam.authorize(ALICE, request("compute:reservations:create"))).allowed
    assert (await iam.authorize(ALICE, request("compute:[a-z]:odd"))).allowed


@pytest.mark.anyio
async def test_plain_token_works_for_demos(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")], hashed=False)
    assert "alice-token" in (tmp_path / "iam.toml").read_text()
    assert (await iam.authorize(ALICE, request())).allowed
    assert not (await iam.authorize(hashlib.sha256(ALICE.encode()).hexdigest(), request())).allowed


def test_tenant_of_knows_static_credentials(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")])
    assert iam.tenant_of(ALICE) == TENANT
    assert iam.tenant_of("mallory-token") is None
    assert iam.tenant_of(None) is None


@pytest.mark.anyio
async def test_each_principal_is_found_by_its_own_token(tmp_path: Path) -> None:
    path = write_static_iam(tmp_path / "iam.toml", [
        StaticPrincipal(ALICE, "user:alice", TENANT, [statement("allow", ["compute:reservations:*"])]),
        StaticPrincipal("bob-token", 'user:"bob" ünïcødé', OTHER_TENANT, [statement("allow", ["compute:pools:*"])]),
    ])
    iam = StaticIam.load(path)
    bob = await iam.authorize("bob-token", request("compute:pools:get", "compute-pool", POOL, OTHER_TENANT))
    assert (bob.allowed, bob.principal) == (True, 'user:"bob" ünïcødé')
    assert not (await iam.authorize("bob-token", request(tenant=OTHER_TENANT))).allowed
    assert iam.tenant_of("bob-token") == OTHER_TENANT


@pytest.mark.anyio
async def test_json_file_decides_like_toml(tmp_path: Path) -> None:
    document = alice_document()
    document["principals"][0]["statements"].append(statement("deny", ["compute:webhooks:*"]))
    iam = StaticIam.load(write_json(tmp_path / "iam.json", document))
    assert (await iam.authorize(ALICE, request())).allowed
    assert not (await iam.authorize(ALICE, request("compute:webhooks:create", "compute-webhook"))).allowed


@pytest.mark.anyio
async def test_initialize_fails_on_missing_action_static(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow")], actions=["compute:sites:create", "compute:sites:list"])
    await iam.initialize(["compute:sites:create", "compute:sites:list"])
    with pytest.raises(IamCatalogError) as caught:
        await iam.initialize(["compute:sites:list", "compute:sites:delete", "compute:sites:rename",
                              "compute:sites:delete"])
    assert caught.value.missing == ["compute:sites:delete", "compute:sites:rename"]
    assert "compute:sites:delete, compute:sites:rename" in str(caught.value)


@pytest.mark.anyio
async def test_initialize_without_catalog_accepts_what_some_statement_matches(tmp_path: Path) -> None:
    iam = static_iam(tmp_path, [statement("allow", ["compute:reservations:*"]), statement("deny", ["compute:nodes:drain"])])
    await iam.initialize(["compute:reservations:create", "compute:nodes:drain"])
    with pytest.raises(IamCatalogError) as caught:
        await iam.initialize(["compute:reservations:create", "compute:nodes:cordon"])
    assert caught.value.missing == ["compute:nodes:cordon"]


@pytest.mark.parametrize(("document", "named"), [
    ({"principals": []}, "principals: must be a non-empty list"),
    (alice_document(extra=1), "top level: unknown key(s) extra"),
    (alice_document(actions=["compute:a", ""]), "actions[1]: must be a non-empty string"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "statements": [statement("allow")]}]},
     "principals[0]: needs token_sha256 or token"),
    ({"principals": [{"principal": "user:a", "tenant": "acme", "token": "t", "statements": [statement("allow")]}]},
     "principals[0].tenant: must be a uuid"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token_sha256": "abc", "statements": [statement("allow")]}]},
     "principals[0].token_sha256: must be 64 hex digits"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token": "t", "token_sha256": "0" * 64,
                      "statements": [statement("allow")]}]},
     "principals[0]: token_sha256 is not the SHA-256 of token"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token": "t",
                      "statements": [statement("allow"), statement("permit")]}]},
     "principals[0].statements[1].effect: must be 'allow' or 'deny'"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token": "t",
                      "statements": [{"effect": "allow", "actions": "compute:*", "resources": ["*"]}]}]},
     "principals[0].statements[0].actions: must be a non-empty list"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token": "t",
                      "statements": [{"effect": "allow", "actions": ["*"], "resources": ["*"], "when": {}}]}]},
     "principals[0].statements[0]: unknown key(s) when"),
    ({"principals": [{"principal": "user:a", "tenant": TENANT, "token": "t", "statements": [statement("allow")]},
                     {"principal": "user:b", "tenant": TENANT, "token": "t", "statements": [statement("allow")]}]},
     "principals 'user:a' and 'user:b' have the same token"),
])
def test_invalid_file_names_the_bad_entry(tmp_path: Path, document: Any, named: str) -> None:
    path = write_json(tmp_path / "iam.json", document)
    with pytest.raises(IamConfigError) as caught:
        StaticIam.load(path)
    assert str(path) in str(caught.value) and named in str(caught.value)


def test_unparseable_or_unknown_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[[principals]\n")
    (tmp_path / "iam.yaml").write_text("principals: []\n")
    for name in ("bad.toml", "iam.yaml", "absent.json"):
        with pytest.raises(IamConfigError, match=name):
            StaticIam.load(tmp_path / name)


def test_file_over_size_bound_is_refused(tmp_path: Path) -> None:
    document = alice_document()
    document["principals"][0]["principal"] = "user:" + "a" * POLICY_FILE_BYTES_MAX
    with pytest.raises(IamConfigError, match=f"larger than {POLICY_FILE_BYTES_MAX} bytes"):
        StaticIam.load(write_json(tmp_path / "iam.json", document))


def test_decision_and_request_in_json_are_what_sql_exchanges() -> None:
    decision = Decision(True, "allowed by statement 0", [{"index": 0}], "user:alice")
    assert decision.as_json() == {"allowed": True, "reason": "allowed by statement 0", "matched": [{"index": 0}],
                                  "principal": "user:alice"}
    prepared = {"tenantId": TENANT, "action": "compute:pools:get", "resource": {"type": "compute-pool", "id": POOL},
                "attributes": {"site_id": "s"}}
    assert AuthorizeRequest.from_json(prepared) == AuthorizeRequest(TENANT, "compute:pools:get", "compute-pool", POOL)
    assert AuthorizeRequest.from_json(prepared).resource == f"compute-pool/{POOL}"


# --- Better IAM --------------------------------------------------------------------------------------

def received_json(received: ReceivedRequest) -> tuple[str, str, str | None, str | None, str | None, Any]:
    """What a request carried: method, path, the three headers Better IAM reads, and the body."""
    return (received.method, received.path, received.header("X-Better-IAM"), received.header("Content-Type"),
            received.header("Authorization"), received.body)


@pytest.mark.anyio
async def test_better_iam_is_sent_only_what_its_authorize_route_reads() -> None:
    """http.ts dispatch('authorize') reads tenantId, action, resource.type and resource.id: the
    attributes api.prepare answers reach Better IAM's policies only through its resolver, never here."""
    prepared = {"tenantId": TENANT, "action": "compute:reservations:create",
                "resource": {"type": "compute-reservation", "id": RESERVATION},
                "attributes": {"count": 2, "shape": "1xH200"}}
    with IamServer(mode="allow") as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(ALICE, AuthorizeRequest.from_json(prepared))
        [received] = server.requests()
    assert received_json(received) == (
        "POST", f"{BASE_PATH}/authorize", "1", "application/json", f"Bearer {ALICE}",
        {"tenantId": TENANT, "action": "compute:reservations:create",
         "resource": {"type": "compute-reservation", "id": RESERVATION}})
    assert decision == Decision(True, "allowed", [], None)  # Better IAM names no principal


@pytest.mark.anyio
async def test_better_iam_allow_is_passed_through_once() -> None:
    with IamServer(mode="policy", policies={ALICE: TokenPolicy(TENANT, ("compute:*",))}) as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(ALICE, request())
        assert server.calls == 1
    assert decision == Decision(True, "allowed", [], None)


@pytest.mark.anyio
async def test_better_iam_deny_is_a_deny() -> None:
    with IamServer(mode="deny") as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(ALICE, request())
    assert decision == Decision(False, "ACCESS_DENIED", [], None)


@pytest.mark.anyio
async def test_better_iam_per_token_policy_and_denied_actions() -> None:
    policies = {ALICE: TokenPolicy(TENANT, ("compute:reservations:*",)), "bob-token": TokenPolicy(OTHER_TENANT)}
    with IamServer(mode="policy", policies=policies, deny_actions=("compute:reservations:rel*",)) as server:
        async with better_iam(server.url) as iam:
            assert (await iam.authorize(ALICE, request())).allowed
            assert not (await iam.authorize(ALICE, request("compute:pools:get", "compute-pool", POOL))).allowed
            assert not (await iam.authorize(ALICE, request("compute:reservations:release"))).allowed
            assert not (await iam.authorize("bob-token", request())).allowed  # another tenant
            assert (await iam.authorize("bob-token", request(tenant=OTHER_TENANT))).allowed
            unknown = await iam.authorize("mallory-token", request())
    assert unknown == Decision(False, "iam error: UNAUTHENTICATED", [], None)  # Better IAM answers 401


@pytest.mark.anyio
async def test_better_iam_denies_an_action_its_catalog_does_not_know() -> None:
    with IamServer(mode="allow", catalog=("compute:reservations:create",)) as server:
        async with better_iam(server.url) as iam:
            assert (await iam.authorize(ALICE, request())).allowed
            decision = await iam.authorize(ALICE, request("compute:reservations:teleport"))
    assert decision == Decision(False, "ACCESS_DENIED", [], None)


@pytest.mark.anyio
async def test_missing_credential_is_denied_without_asking() -> None:
    with IamServer(mode="allow") as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(None, request())
        assert server.calls == 0
    assert decision == Decision(False, "no credential", [], None)


@pytest.mark.anyio
async def test_timeout_is_a_deny() -> None:
    with IamServer(mode="allow", delay=2.0) as server:
        async with better_iam(server.url, timeout=0.2) as iam:
            started = time.monotonic()
            decision = await iam.authorize(ALICE, request())
            elapsed = time.monotonic() - started
        assert server.calls == 1
    assert decision == Decision(False, "iam timeout", [], None)
    assert elapsed < 1.5


@pytest.mark.anyio
async def test_a_trickling_answer_times_out_as_a_whole() -> None:
    """Every byte arrives well within the timeout; the answer as a whole does not."""
    with IamServer(mode="allow", trickle=0.05) as server:
        async with better_iam(server.url, timeout=0.5) as iam:
            started = time.monotonic()
            decision = await iam.authorize(ALICE, request())
            elapsed = time.monotonic() - started
    assert decision == Decision(False, "iam timeout", [], None)
    assert elapsed < 1.5


@pytest.mark.anyio
async def test_error_envelope_is_a_deny() -> None:
    with IamServer(mode="error", error_code="RATE_LIMITED", error_status=429) as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(ALICE, request())
    assert decision == Decision(False, "iam error: RATE_LIMITED", [], None)


@pytest.mark.anyio
async def test_unreachable_iam_is_a_deny() -> None:
    async with better_iam(f"http://127.0.0.1:{free_port()}") as iam:
        decision = await iam.authorize(ALICE, request())
    assert (decision.allowed, decision.reason) == (False, "iam unreachable: ConnectError")


ALLOW = {"allowed": True, "reason": "allowed", "matched": []}


@pytest.mark.parametrize(("answer", "status", "reason"), [
    ("<html>502 Bad Gateway</html>", 200, "iam answered non-JSON (HTTP 200)"),
    (json.dumps({"data": {**ALLOW, "allowed": "true"}}), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps({"data": {**ALLOW, "allowed": 1}}), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps({"data": {"allowed": True}}), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps({"data": {**ALLOW, "matched": {}}}), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps({"allowed": True, "reason": "ok", "matched": []}), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps([{"data": ALLOW}]), 200, "iam answered an unknown document (HTTP 200)"),
    (json.dumps({"data": ALLOW}), 500, "iam answered an unknown document (HTTP 500)"),
    (json.dumps({"error": "boom"}), 500, "iam answered an unknown document (HTTP 500)"),
])
@pytest.mark.anyio
async def test_unknown_answer_is_a_deny(answer: str, status: int, reason: str) -> None:
    with IamServer(mode="garbage", garbage=answer, garbage_status=status) as server:
        async with better_iam(server.url) as iam:
            decision = await iam.authorize(ALICE, request())
    assert decision == Decision(False, reason, [], None)


@pytest.mark.anyio
async def test_answer_over_the_bound_is_a_deny_even_when_it_allows() -> None:
    fits = json.dumps({"data": {**ALLOW, "reason": "x" * (ANSWER_BYTES_MAX - 100)}})
    too_large = json.dumps({"data": {**ALLOW, "reason": "x" * ANSWER_BYTES_MAX}})
    with IamServer(mode="garbage", garbage=fits) as server:
        async with better_iam(server.url) as iam:
            assert (await iam.authorize(ALICE, request())).allowed
            server.configure(garbage=too_large)
            decision = await iam.authorize(ALICE, request())
    assert decision == Decision(False, f"iam answer larger than {ANSWER_BYTES_MAX} bytes", [], None)


@pytest.mark.anyio
async def test_initialize_reads_the_platform_catalog_with_the_service_credential_in_its_tenant() -> None:
    """api/catalog.ts actions.list: POST {base}/actions/list {tenantId}, iam:actions:read in that
    tenant. A tenant-registered action is known in that tenant only, so it does not count."""
    catalog = ("compute:sites:create", "compute:sites:list")
    with IamServer(mode="allow", catalog=catalog, tenant_actions=("compute:sites:rename",),
                   service_token=SERVICE_TOKEN, service_tenant=SERVICE_TENANT) as server:
        async with better_iam(server.url) as iam:
            await iam.initialize(catalog)
            with pytest.raises(IamCatalogError) as caught:
                await iam.initialize(["compute:sites:list", "compute:sites:rename", "compute:sites:delete"])
        received = server.requests()
        assert server.catalog_calls == 2
    assert caught.value.missing == ["compute:sites:delete", "compute:sites:rename"]
    assert [received_json(request) for request in received] == 2 * [
        ("POST", f"{BASE_PATH}/actions/list", "1", "application/json", f"Bearer {SERVICE_TOKEN}",
         {"tenantId": SERVICE_TENANT})]


@pytest.mark.parametrize(("behaviour", "message"), [
    ({"mode": "policy", "catalog": ("compute:sites:list",)}, "iam error: UNAUTHENTICATED"),
    ({"mode": "allow", "catalog": ("compute:sites:list",), "service_token": "another-service"}, "iam error: ACCESS_DENIED"),
    ({"mode": "allow", "catalog": ("compute:sites:list",), "service_tenant": OTHER_TENANT}, "iam error: ACCESS_DENIED"),
    ({"mode": "error", "error_code": "INTERNAL_ERROR"}, "iam error: INTERNAL_ERROR"),
    ({"mode": "garbage", "garbage": json.dumps({"data": {"actions": ["compute:sites:list"]}})}, "unknown answer (HTTP 200)"),
    ({"mode": "garbage", "garbage": json.dumps({"data": ["compute:sites:list"]})}, "unknown answer (HTTP 200)"),
    ({"mode": "garbage", "garbage": json.dumps({"data": [{"name": "compute:sites:list"}]})}, "unknown answer (HTTP 200)"),
    ({"mode": "garbage", "garbage": "not json"}, "unknown answer (HTTP 200)"),
    ({"mode": "allow", "catalog": ("compute:sites:list",), "delay": 2.0}, "timeout"),
])
@pytest.mark.anyio
async def test_initialize_fails_closed_when_the_catalog_cannot_be_read(behaviour: dict[str, Any], message: str) -> None:
    with IamServer(**behaviour) as server:
        async with better_iam(server.url, timeout=0.3) as iam:
            with pytest.raises(IamUnavailableError, match=re.escape(message)):
                await iam.initialize(["compute:sites:list"])


@pytest.mark.anyio
async def test_initialize_fails_closed_when_iam_is_unreachable() -> None:
    async with better_iam(f"http://127.0.0.1:{free_port()}") as iam:
        with pytest.raises(IamUnavailableError):
            await iam.initialize(["compute:sites:list"])


@pytest.mark.anyio
async def test_a_request_that_cannot_be_sent_is_a_deny() -> None:
    with IamServer(mode="allow") as server:
        async with better_iam(server.url) as iam:
            unsendable = AuthorizeRequest(TENANT, "compute:sites:get", "compute-site", object())  # type: ignore[arg-type]
            decision = await iam.authorize(ALICE, unsendable)
        assert server.calls == 0
    assert decision == Decision(False, "iam request failed: TypeError", [], None)


@pytest.mark.parametrize("url", ["ftp://iam.example", "iam.example/authorize", ""])
def test_better_iam_refuses_a_url_it_could_never_call(url: str) -> None:
    with pytest.raises(IamConfigError, match="is not an http"):
        BetterIam(url, SERVICE_TOKEN, SERVICE_TENANT)


def test_better_iam_needs_the_tenant_whose_catalog_it_reads() -> None:
    with pytest.raises(IamConfigError, match="the Better IAM tenant of the service credential"):
        BetterIam("http://127.0.0.1:9/api/iam", SERVICE_TOKEN, "")


def test_serve_api_with_better_iam_needs_the_catalog_tenant() -> None:
    with pytest.raises(typer.BadParameter, match="--iam-tenant"):
        make_iam(IamKind.better_iam, None, "http://127.0.0.1:9/api/iam", SERVICE_TOKEN, None, 2.0)


def test_better_iam_knows_no_tenant_of_a_credential() -> None:
    assert BetterIam("http://127.0.0.1:9", SERVICE_TOKEN, SERVICE_TENANT).tenant_of(ALICE) is None


# --- the test server: Better IAM's surface, nothing more ----------------------------------------------

def call(server: IamServer, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Status and JSON answer of one request to the stand-in (path from its origin)."""
    sent = {"X-Better-IAM": "1", "Authorization": f"Bearer {ALICE}"} | (headers or {})
    answer = httpx.request(method, server.origin + path, json=body, headers=sent)
    return answer.status_code, answer.json() if answer.content else None


@pytest.mark.parametrize(("method", "path", "body", "headers", "expected"), [
    ("GET", f"{BASE_PATH}/actions", None, {}, (404, "NOT_FOUND")),  # what the adapter used to call
    ("GET", f"{BASE_PATH}/authorize", None, {}, (404, "NOT_FOUND")),
    ("POST", "/actions/list", {"tenantId": TENANT}, {}, (404, "NOT_FOUND")),  # outside the base path
    ("POST", f"{BASE_PATH}/actions", {"tenantId": TENANT}, {}, (404, "NOT_FOUND")),
    ("POST", f"{BASE_PATH}/actions/get", {"tenantId": TENANT}, {}, (404, "NOT_FOUND")),
    ("PUT", f"{BASE_PATH}/authorize", {}, {}, (405, "METHOD_NOT_ALLOWED")),
    ("DELETE", f"{BASE_PATH}/actions/list", None, {}, (405, "METHOD_NOT_ALLOWED")),
    ("POST", f"{BASE_PATH}/authorize", {}, {"X-Better-IAM": "0"}, (403, "CSRF_REJECTED")),
    ("POST", f"{BASE_PATH}/authorize", [], {}, (400, "INVALID_INPUT")),
    ("POST", f"{BASE_PATH}/authorize", {"tenantId": TENANT, "action": "a"}, {}, (400, "INVALID_INPUT")),
    ("POST", f"{BASE_PATH}/authorize", {"tenantId": " ", "action": "a", "resource": {"type": "t", "id": "i"}}, {},
     (400, "INVALID_INPUT")),
    ("POST", f"{BASE_PATH}/authorize", {"tenantId": TENANT, "action": "a", "resource": {"type": "t", "id": "i"}},
     {"Authorization": ""}, (401, "UNAUTHENTICATED")),
    ("POST", f"{BASE_PATH}/actions/list", {"tenantId": TENANT}, {"Authorization": ""}, (401, "UNAUTHENTICATED")),
])
def test_test_server_refuses_what_better_iam_refuses(method: str, path: str, body: Any, headers: dict[str, str],
                                                     expected: tuple[int, str]) -> None:
    with IamServer(mode="allow", catalog=("a",)) as server:
        status, answer = call(server, method, path, body, headers)
        assert [(request.method, request.path) for request in server.requests()] == [(method, path)]
    assert (status, answer["error"]["code"]) == expected
    assert set(answer) == {"error"} and set(answer["error"]) == {"code", "message"}


def test_test_server_answers_what_better_iam_answers() -> None:
    with IamServer(mode="allow", catalog=("a", "b"), tenant_actions=("t:x",)) as server:
        authorize = call(server, "POST", f"{BASE_PATH}/authorize",
                         {"tenantId": TENANT, "action": "a", "resource": {"type": "t", "id": "i"}})
        listed = call(server, "POST", f"{BASE_PATH}/actions/list", {"tenantId": TENANT})
        health, up = call(server, "GET", f"{BASE_PATH}/health")
        preflight = call(server, "OPTIONS", f"{BASE_PATH}/authorize")
        assert (server.calls, server.catalog_calls) == (1, 1)
        server.reset()
        assert (server.calls, server.catalog_calls, server.requests()) == (0, 0, [])
    assert authorize == (200, {"data": {"allowed": True, "reason": "allowed", "matched": []}})
    assert listed == (200, {"data": [{"name": "a", "source": "platform"}, {"name": "b", "source": "platform"},
                                     {"name": "t:x", "source": "tenant", "resourceType": "t"}]})
    assert (health, up["status"]) == (200, "ok")
    assert preflight == (204, None)


def test_test_server_refuses_a_body_over_64_kib() -> None:
    with IamServer(mode="allow") as server:
        answer = httpx.post(f"{server.url}/authorize", content=b"{" + b" " * 65536 + b"}",
                            headers={"X-Better-IAM": "1", "Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
