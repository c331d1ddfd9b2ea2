"""The HTTP relay (`better-compute serve api`) as a real process against a real database: the
request checks (product header, body bound, schema, tenant), the one admission flow end to end,
fail-closed IAM (deny, timeout, missing action), the event stream (resume, heartbeat, bounds,
shutdown), the resolver, /health, /metrics and the generated OpenAPI document."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from better_compute import embedded
from better_compute.db import AsyncDatabase
from better_compute.errors import ContractError
from better_compute.relay.inbound import HTTP_BODY_BYTES
from better_compute.relay.protocol import HttpBounds
from better_compute.relay.sse import Notifier
from bare_metal_support import AGENT_KEY, enrollment
from fleet import H200_MODEL, h200_inventory
from iam_server import IamServer, statement, write_static_iam
from test_errors import FLAKY
from relay_support import Relay, RelayDidNotStart, better_iam, headers, running_relay, static_iam
from worker_support import WEBHOOK_KEYS, register_webhook_key, wait_until

SCHEMATHESIS_CONFIG = Path(__file__).resolve().parent / "schemathesis.toml"
# The fuzz test replays one fixed seed, so CI on a clean clone runs the very cases that passed here;
# `make fuzz` draws fresh seeds with more examples to look for new failures (BC_FUZZ_SEED=random).
FUZZ_SEED = os.environ.get("BC_FUZZ_SEED", "20261130")
FUZZ_EXAMPLES = os.environ.get("BC_FUZZ_EXAMPLES", "10")
TENANT = "00000000-0000-4000-8000-00000000000a"
OTHER_TENANT = "00000000-0000-4000-8000-00000000000b"
ALICE = "alice-token"  # may do everything in TENANT
READER = "reader-token"  # may only read (no mutation) in TENANT
NOBODY = "nobody-token"  # may do nothing in TENANT
SECRET = "resolver-shared-secret"


@pytest.fixture
def iam_file(tmp_path: Path) -> Path:
    return write_static_iam(tmp_path / "iam.toml", [
        (ALICE, "user:alice", TENANT, [statement("allow")]),
        (READER, "user:reader", TENANT, [statement("allow", ["compute:*:list", "compute:*:get"])]),
        (NOBODY, "user:nobody", TENANT, [statement("deny")]),
    ])


@pytest.fixture
def relay(db_dsn: str, db: psycopg.Connection, iam_file: Path) -> Iterator[Relay]:
    register_webhook_key(db)  # as a worker does when it starts: webhooks.create seals the secret to it
    db.commit()
    with running_relay(db_dsn, static_iam(iam_file), ["--resolve-secret", SECRET]) as running:
        yield running


def actions(db: psycopg.Connection) -> list[str]:
    """Every action of the catalog (what a Better IAM stand-in must know for the relay to start)."""
    return [row[0] for row in db.execute("SELECT action FROM api.catalog()")]


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "hint"}, body
    return body["error"]


def metric(relay: Relay, name: str, **labels: str) -> float:
    """One sample of /metrics (0 when absent)."""
    text = httpx.get(relay.url + "/metrics").text
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    return 0.0


# -- the relay's database helper ----------------------------------------------------------------------

def test_the_async_helper_runs_as_bc_api_and_maps_errors(db_dsn: str) -> None:
    async def scenario() -> None:
        async with AsyncDatabase(db_dsn, max_size=2, role="bc_api") as database:
            assert {row["method"] for row in await database.rows("api.catalog")} >= {"sites.create", "events.list"}
            assert await database.call("api.now") is not None
            with pytest.raises(ContractError) as private:  # bc_api may only EXECUTE in schema api
                await database.call("compute.limit", "http_body_bytes")
            assert (private.value.code, private.value.sqlstate) == ("INTERNAL", "42501")
            with pytest.raises(ContractError) as refused:
                await database.call("api.resolve", "compute-site", str(uuid.uuid4()))
            assert (refused.value.code, refused.value.http_status) == ("NOT_FOUND", 404)

    asyncio.run(scenario())


def test_the_async_helper_retries_serialization_failures_a_bounded_number_of_times(db_dsn: str,
                                                                                   db: psycopg.Connection) -> None:
    db.execute(FLAKY)
    db.commit()

    async def scenario() -> None:
        async with AsyncDatabase(db_dsn, max_size=2) as database:
            assert await database.call("public.flaky", 3) == 4  # three 40001s, then success
            with pytest.raises(ContractError) as raised:
                await database.call("public.flaky", 1000)
            assert (raised.value.code, raised.value.sqlstate) == ("INTERNAL", "40001")

    asyncio.run(scenario())
    assert db.execute("SELECT last_value FROM public.attempts").fetchone() == (4 + 6,)


# -- request checks ------------------------------------------------------------------------------------

def test_a_call_without_the_product_header_is_invalid_argument(relay: Relay) -> None:
    response = httpx.post(relay.url + "/api/compute/sites/list", json={},
                          headers={"Authorization": f"Bearer {ALICE}", "X-Tenant-Id": TENANT})
    assert response.status_code == 400
    assert error_of(response)["code"] == "INVALID_ARGUMENT"
    assert "X-Better-Compute" in error_of(response)["message"]


def test_a_body_over_64_kib_is_refused_with_413_by_length_and_while_streaming(relay: Relay) -> None:
    big = json.dumps({"name": "x" * HTTP_BODY_BYTES}).encode()
    declared = httpx.post(relay.url + "/api/compute/sites/create", content=big, headers=headers(ALICE, TENANT))
    assert declared.status_code == 413
    assert error_of(declared)["code"] == "INVALID_ARGUMENT"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer, counted as it arrives
        for start in range(0, len(big), 8192):
            yield big[start:start + 8192]

    streamed = httpx.post(relay.url + "/api/compute/sites/create", content=chunks(), headers=headers(ALICE, TENANT))
    assert streamed.status_code == 413
    assert error_of(streamed)["code"] == "INVALID_ARGUMENT"


def test_the_body_bound_is_the_databases_http_body_bytes(db: psycopg.Connection) -> None:
    row = db.execute("SELECT value FROM compute.limits WHERE name = 'http_body_bytes'").fetchone()
    assert row is not None and row[0] == HTTP_BODY_BYTES


def test_a_wrong_verb_is_405_naming_the_verbs_it_takes(relay: Relay) -> None:
    with httpx.Client(base_url=relay.url) as client:
        got = client.get("/api/compute/sites/list", headers=headers(ALICE, TENANT))
        traced = client.request("TRACE", "/health")
    assert got.status_code == 405 and error_of(got)["code"] == "INVALID_ARGUMENT"
    assert got.headers["allow"] == "POST"
    assert traced.status_code == 405 and "GET" in traced.headers["allow"]


def test_an_unknown_method_is_not_found(relay: Relay) -> None:
    response = relay.post("sites.explode", {}, ALICE, TENANT)
    assert response.status_code == 404
    assert error_of(response)["code"] == "NOT_FOUND"
    assert error_of(httpx.get(relay.url + "/nowhere"))["code"] == "NOT_FOUND"


def test_input_is_checked_against_the_schema_before_iam_is_asked(relay: Relay) -> None:
    response = relay.post("sites.create", {"name": 5}, ALICE, TENANT)
    assert response.status_code == 400
    assert error_of(response)["code"] == "INVALID_ARGUMENT"
    assert "$.name" in error_of(response)["message"]
    unknown = relay.post("sites.list", {"colour": "red"}, ALICE, TENANT)
    assert unknown.status_code == 400 and "colour" in error_of(unknown)["message"]
    not_an_object = relay.post("sites.list", [], ALICE, TENANT)
    assert not_an_object.status_code == 400
    nul = relay.post("sites.create", {"name": "a\x00b"}, ALICE, TENANT)  # PostgreSQL text cannot hold it
    assert nul.status_code == 400 and "u0000" in error_of(nul)["message"]
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="allow") == 0
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="deny") == 0


def test_a_number_beyond_a_double_is_invalid_argument_not_an_internal_error(relay: Relay) -> None:
    """1e400 is valid JSON that no double holds (Python reads it as inf, which is not JSON again):
    refused as input, like NaN and Infinity, before the database or IAM is asked."""
    with relay.client() as client:
        answers = [client.post("/api/compute/nodes/command", content=body, headers=headers(ALICE, TENANT)
                               | {"content-type": "application/json"})
                   for body in ('{"node_id": "%s", "kind": "reboot", "args": {"x": 1e400}}' % uuid.uuid4(),
                                '{"node_id": "%s", "kind": "reboot", "args": {"x": -1E+999}}' % uuid.uuid4(),
                                '{"limit": NaN}')]
    assert [answer.status_code for answer in answers] == [400, 400, 400], [answer.text for answer in answers]
    assert [error_of(answer)["code"] for answer in answers] == ["INVALID_ARGUMENT"] * 3
    assert "1e400" in error_of(answers[0])["message"]
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="allow") == 0


def test_the_tenant_comes_from_the_header_else_from_the_credential_else_400(relay: Relay) -> None:
    assert relay.data("sites.create", {"name": "from-the-file"}, ALICE)["site_id"]  # the static file's tenant
    sites = relay.data("sites.list", {}, ALICE, TENANT)
    assert [site["name"] for site in sites] == ["from-the-file"]
    unknown = relay.post("sites.list", {}, "a-token-the-file-does-not-know")
    assert unknown.status_code == 400 and error_of(unknown)["message"] == "no tenant"
    not_a_uuid = relay.post("sites.list", {}, ALICE, "tenant-a")
    assert not_a_uuid.status_code == 400 and "uuid" in error_of(not_a_uuid)["message"]


def test_a_call_without_a_credential_is_401_before_anything_is_read_or_asked(relay: Relay) -> None:
    """No `Authorization: Bearer`: UNAUTHENTICATED with its challenge, before the input is checked,
    the database is asked or IAM decides (there is nobody to decide about)."""
    anonymous = relay.post("sites.create", {"name": 7}, tenant=TENANT)  # bad input too: the credential comes first
    assert anonymous.status_code == 401 and error_of(anonymous)["code"] == "UNAUTHENTICATED"
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="better-compute"'
    assert "Authorization: Bearer" in error_of(anonymous)["hint"]
    basic = relay.post("sites.list", {}, tenant=TENANT, extra={"Authorization": "Basic YWxpY2U6eA=="})
    assert basic.status_code == 401
    with httpx.Client(base_url=relay.url) as client:
        stream = client.get("/api/compute/watch", headers=headers(None, TENANT))
    assert stream.status_code == 401 and error_of(stream)["code"] == "UNAUTHENTICATED"
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="allow") == 0
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="deny") == 0


def test_the_credential_never_reaches_the_log(relay: Relay) -> None:
    relay.post("sites.create", {"name": "logged"}, ALICE, TENANT)
    relay.post("sites.create", {"name": 7}, "a-secret-nobody-knows", TENANT)
    assert ALICE not in relay.log() and "a-secret-nobody-knows" not in relay.log()


# -- admission -------------------------------------------------------------------------------------------

def register_node(db: psycopg.Connection, pool_id: str, gpus: int) -> None:
    """A node joins as fleet traffic does (not through the API): the real H200 inventory."""
    hostname = f"node-{uuid.uuid4().hex[:8]}"
    db.execute("SELECT compute.node_register(%s, %s, %s)", (pool_id, hostname, Jsonb(h200_inventory(hostname, gpus))))
    db.commit()


def site_and_pool_offering_gpus(relay: Relay, db: psycopg.Connection, site_name: str,
                                gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Through the API: a site, an H200 pool in it offering whole GPUs; then a node with `gpus` joins."""
    site = relay.data("sites.create", {"name": site_name}, ALICE, TENANT)
    pool = relay.data("pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL},
                      ALICE, TENANT)
    register_node(db, pool["pool_id"], gpus=gpus)
    relay.data("offerings.create", {"pool_id": pool["pool_id"], "shape": "gpu", "max_count": gpus,
                                    "max_duration_seconds": 86400}, ALICE, TENANT)
    return site, pool


def test_a_reservation_goes_through_prepare_one_decision_and_admit(relay: Relay, db: psycopg.Connection) -> None:
    _, pool = site_and_pool_offering_gpus(relay, db, "lab", gpus=2)
    now = db.execute("SELECT compute.compute_now()").fetchone()[0]
    end = (now + timedelta(hours=2)).isoformat()
    created = relay.data("reservations.create", {"pool_id": pool["pool_id"], "shape": "gpu", "count": 2, "end": end},
                         ALICE, TENANT)
    reservation_id = created["reservation_id"]
    assert relay.data("reservations.get", {"reservation_id": reservation_id}, ALICE, TENANT)["state"] == "active"

    full = relay.post("reservations.create", {"pool_id": pool["pool_id"], "shape": "gpu", "count": 1, "end": end},
                      ALICE, TENANT)
    assert full.status_code == 409 and error_of(full)["code"] == "CAPACITY_CONFLICT"

    elsewhere = relay.post("reservations.get", {"reservation_id": reservation_id}, ALICE, OTHER_TENANT)
    assert elsewhere.status_code == 403  # not found in a tenant alice may not act in: IAM's deny is the answer

    audited = db.execute("SELECT decision, principal FROM compute.audit_events WHERE resource_id = %s",
                         (reservation_id,)).fetchall()
    assert audited == [("allow", "user:alice")]
    released = relay.data("reservations.release", {"reservation_id": reservation_id}, ALICE, TENANT)
    assert released["state"] == "released"


def test_a_taken_name_is_409_already_exists(relay: Relay) -> None:
    relay.data("sites.create", {"name": "taken"}, ALICE, TENANT)
    again = relay.post("sites.create", {"name": "taken"}, ALICE, TENANT)
    assert again.status_code == 409 and error_of(again)["code"] == "ALREADY_EXISTS"
    assert error_of(again)["hint"] == "Choose another name, or use the existing site (sites.list)."


def test_a_deny_is_403_access_denied_after_exactly_one_decision(db_dsn: str, db: psycopg.Connection) -> None:
    with IamServer(mode="deny", catalog=actions(db)) as iam, running_relay(db_dsn, better_iam(iam.url)) as relay:
        response = relay.post("sites.create", {"name": "denied"}, ALICE, TENANT)
        assert response.status_code == 403
        assert error_of(response)["code"] == "ACCESS_DENIED"
        assert iam.calls == 1
        assert metric(relay, "bc_relay_iam_decisions_total", outcome="deny") == 1
    denials = db.execute("SELECT action FROM compute.audit_events WHERE decision = 'deny'").fetchall()
    assert denials == [("compute:sites:create",)]
    assert db.execute("SELECT count(*) FROM compute.sites").fetchone()[0] == 0


def test_a_denied_read_is_audited_and_an_allowed_one_is_not(relay: Relay, db: psycopg.Connection) -> None:
    """Issue 11 C4: a read IAM denies, a method call or the event stream, writes one audit event with
    the principal, action, resource and IAM's reason; an allowed read writes none (docs/api.md)."""
    relay.data("sites.create", {"name": "audited"}, ALICE, TENANT)
    db.rollback()
    [(created,)] = db.execute("SELECT event_id FROM compute.audit_events").fetchall()
    assert relay.data("sites.list", {}, READER, TENANT)[0]["name"] == "audited"
    denied = relay.post("audit.proof", {"event_id": created}, READER, TENANT)
    assert denied.status_code == 403 and error_of(denied)["code"] == "ACCESS_DENIED"
    with relay.client() as client, watch(client, NOBODY) as stream:
        assert stream.status_code == 403
    db.rollback()
    audited = db.execute("SELECT principal, action, resource_type || '/' || resource_id, decision, reason <> '' "
                         "FROM compute.audit_events WHERE event_id <> %s ORDER BY event_id", (created,)).fetchall()
    assert audited == [("user:reader", "compute:audit:proof", f"compute-audit-event/{created}", "deny", True),
                       ("user:nobody", "compute:events:list", "compute-event/*", "deny", True)]


def test_an_iam_timeout_is_a_deny(db_dsn: str, db: psycopg.Connection) -> None:
    with IamServer(mode="allow", catalog=actions(db)) as iam, \
            running_relay(db_dsn, better_iam(iam.url, timeout=0.5)) as relay:
        iam.configure(delay=3.0)
        response = relay.post("sites.list", {}, ALICE, TENANT)
        assert response.status_code == 403
        assert error_of(response)["code"] == "ACCESS_DENIED"
        assert "timeout" in error_of(response)["message"]


def test_a_relay_whose_iam_lacks_an_action_does_not_start(db_dsn: str, tmp_path: Path) -> None:
    path = write_static_iam(tmp_path / "short.toml", [(ALICE, "user:alice", TENANT, [statement("allow")])],
                            actions=["compute:sites:create"])
    with pytest.raises(RelayDidNotStart) as failure:
        with running_relay(db_dsn, static_iam(path)):
            pass
    assert failure.value.status not in (0, None)
    assert "lacks" in failure.value.log and "compute:reservations:create" in failure.value.log


# -- event stream ------------------------------------------------------------------------------------------

def read_events(response: httpx.Response, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first `count` events (id, data) of an SSE response; comments are skipped."""
    events: list[tuple[str, dict[str, Any]]] = []
    event_id, data = None, None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            assert event_id is not None
            events.append((event_id, data))
            event_id, data = None, None
            if len(events) == count:
                break
    return events


def watch(client: httpx.Client, token: str = ALICE, last_event_id: str | None = None) -> Any:
    extra = {"Last-Event-ID": last_event_id} if last_event_id else {}
    return client.stream("GET", "/api/compute/watch", headers=headers(token, TENANT) | extra)


def test_watch_streams_the_tenants_events_and_resumes_after_last_event_id(relay: Relay) -> None:
    names = ["one", "two", "three"]
    for name in names:
        relay.data("sites.create", {"name": name}, ALICE, TENANT)
    with relay.client() as client:
        with watch(client) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = read_events(response, 3)
        assert [data["payload"]["name"] for _, data in events] == names
        assert [event_id for event_id, _ in events] == [data["id"] for _, data in events]

        with watch(client, last_event_id=events[0][0]) as response:
            resumed = read_events(response, 2)
        assert [event_id for event_id, _ in resumed] == [event_id for event_id, _ in events[1:]]



def test_watch_is_woken_by_notify_not_only_by_polling(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), ["--poll-seconds", "60"]) as relay, relay.client() as client:
        with watch(client) as response:
            assert response.status_code == 200
            started = time.monotonic()
            relay.data("sites.create", {"name": "live"}, ALICE, TENANT)
            assert read_events(response, 1)[0][1]["payload"]["name"] == "live"
            assert time.monotonic() - started < 30  # long before the next poll


def test_a_notification_wakes_the_streams_again_a_moment_later(db_dsn: str, db: psycopg.Connection) -> None:
    """One committing writer at a time notifies (compute.wake_at_commit); those that skipped may finish just after it, so
    a notification wakes every stream at once and once more without another notification or a poll."""
    async def woken_twice() -> bool:
        notifier = Notifier(AsyncDatabase(db_dsn))
        wakeup = notifier.subscribe()
        listening = asyncio.create_task(notifier.run())
        try:
            await asyncio.wait_for(wakeup.wait(), 10)  # LISTEN is in place
            wakeup.clear()
            db.execute("SELECT pg_notify('bc_outbox', '')")
            db.commit()
            await asyncio.wait_for(wakeup.wait(), 10)
            wakeup.clear()
            try:
                await asyncio.wait_for(wakeup.wait(), 10)
            except asyncio.TimeoutError:
                return False
            return True
        finally:
            listening.cancel()
    assert asyncio.run(woken_twice()), "no second wake-up"


def test_watch_sends_heartbeats_when_quiet(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), ["--heartbeat-seconds", "0.2"]) as relay, relay.client() as client:
        with watch(client) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line) == ": heartbeat"


def test_watch_is_decided_once_at_connect(db_dsn: str, db: psycopg.Connection) -> None:
    with IamServer(mode="allow", catalog=actions(db)) as iam, running_relay(db_dsn, better_iam(iam.url)) as relay:
        iam.reset()
        with relay.client() as client, watch(client) as response:
            assert response.status_code == 200
        [request] = iam.requests()
        assert request.body["action"] == "compute:events:list"
        assert request.body["resource"] == {"type": "compute-event", "id": "*"}
        iam.configure(mode="deny")
        with relay.client() as client, watch(client) as response:
            assert response.status_code == 403


def test_watch_refuses_streams_over_its_bound(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), ["--max-streams", "1"]) as relay, relay.client() as client:
        with watch(client) as first:
            assert first.status_code == 200
            with watch(client) as second:
                assert second.status_code == 503
            assert metric(relay, "bc_relay_event_streams") == 1
        wait_until(lambda: metric(relay, "bc_relay_event_streams") == 0, 10, "the relay to see the client leave")
        with watch(client) as again:  # the slot is free once the first stream ended
            assert again.status_code == 200


def test_a_client_that_reads_nothing_is_disconnected_and_frees_its_slot(db_dsn: str, iam_file: Path,
                                                                         db: psycopg.Connection) -> None:
    """Far more event bytes than the socket buffers hold, and a client with a tiny receive window
    that never reads: the relay gives up on it after stall_seconds instead of holding a stream."""
    db.execute("""SELECT compute.outbox_emit(%s, 'test', n::text, 'test.filler',
                                             jsonb_build_object('fill', repeat('x', 8000)))
                    FROM generate_series(1, 3000) AS n""", (TENANT,))
    db.commit()
    with running_relay(db_dsn, static_iam(iam_file), ["--stream-buffer", "10", "--stall-seconds", "0.5"]) as relay:
        host, port = relay.url.removeprefix("http://").rsplit(":", 1)
        with socket.socket() as stuck:
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.connect((host, int(port)))
            stuck.sendall(f"GET /api/compute/watch HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ALICE}\r\n"
                          f"X-Tenant-Id: {TENANT}\r\n\r\n".encode())
            wait_until(lambda: metric(relay, "bc_relay_event_streams") == 1, 10, "the stream to open")
            wait_until(lambda: metric(relay, "bc_relay_event_streams") == 0, 20, "the stalled stream to be closed")
        assert "the client took nothing" in relay.log()


def address(relay: Relay) -> tuple[str, int]:
    host, port = relay.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def watch_request(host: str) -> bytes:
    return (f"GET /api/compute/watch HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ALICE}\r\n"
            f"X-Tenant-Id: {TENANT}\r\n\r\n").encode()


def reset_after_sending(relay: Relay, request: bytes, pause: float = 0.0) -> None:
    """Send a request and reset the connection after `pause` (SO_LINGER 0: close sends RST, not FIN)."""
    with socket.create_connection(address(relay)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.sendall(request)
        time.sleep(pause)


def open_streams(relay: Relay) -> int:
    return httpx.get(relay.url + "/health").json()["data"]["streams"]


def test_clients_that_reset_right_after_their_watch_request_free_their_slots_and_their_polling(
        db_dsn: str, iam_file: Path) -> None:
    """A stream is cancelled when its client goes; a cancellation lost on the way (Python 3.11's
    wait_for, which psycopg_pool waits for a connection with, drops one that meets a free connection)
    must not leave the stream's slot taken and its producer polling api.events for nobody. A small
    pool makes streams wait for connections, where the cancellations arrive."""
    with running_relay(db_dsn, static_iam(iam_file), ["--poll-seconds", "0.1", "--pool-size", "2"]) as relay:
        host, _ = address(relay)
        for pause in [0, 0.001, 0.003, 0.01, 0.03] * 12:  # gone before, while and after the stream starts
            reset_after_sending(relay, watch_request(host), pause)
        wait_until(lambda: open_streams(relay) == 0, 15, f"the slots to be freed\n{relay.tail()}")
        reads = metric(relay, "bc_relay_event_reads_total")
        assert reads > 0
        time.sleep(1.0)  # ten poll intervals: a producer left behind reads api.events again
        assert metric(relay, "bc_relay_event_reads_total") == reads
        with relay.client() as client, watch(client) as response:
            assert response.status_code == 200


def test_sigterm_finishes_requests_in_flight(db_dsn: str, db: psycopg.Connection) -> None:
    with IamServer(mode="allow", catalog=actions(db)) as iam, \
            running_relay(db_dsn, better_iam(iam.url, timeout=5)) as relay, ThreadPoolExecutor(1) as pool:
        iam.configure(delay=1.0)
        in_flight = pool.submit(relay.post, "sites.create", {"name": "in-flight"}, ALICE, TENANT)
        wait_until(lambda: iam.calls == 1, 5, "the request to reach IAM")
        relay.process.send_signal(signal.SIGTERM)
        assert in_flight.result(timeout=10).status_code == 200
        assert relay.process.wait(10) == -signal.SIGTERM
    assert db.execute("SELECT count(*) FROM compute.sites").fetchone()[0] == 1


def test_sigterm_ends_open_streams_and_the_relay_exits(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file)) as relay, relay.client() as client:
        with watch(client) as response:
            assert response.status_code == 200
            started = time.monotonic()
            relay.process.send_signal(signal.SIGTERM)
            assert list(response.iter_lines()) == []  # the stream ends instead of waiting for the grace period
            assert relay.process.wait(10) == -signal.SIGTERM
            assert time.monotonic() - started < 5
        assert "Application shutdown complete" in relay.log()


# -- HTTP bounds (slow clients) ---------------------------------------------------------------------------

BOUNDS = ["--head-seconds", "1", "--body-seconds", "1", "--keep-alive-seconds", "1", "--max-connections", "4"]
CLOSE_WITHIN = 6.0  # seconds a test waits for the relay to close a connection held past a bound of 1 s


def closed_by_the_relay(client: socket.socket) -> bool:
    """Whether the relay closes the connection within CLOSE_WITHIN s, reading (and dropping) what it sends."""
    client.settimeout(CLOSE_WITHIN)
    try:
        while client.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def trickle(client: socket.socket, data: bytes, seconds: float) -> None:
    """Send `data` a byte at a time over `seconds` (slowloris), stopping when the relay closes."""
    for byte in data:
        try:
            client.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return
        time.sleep(seconds / len(data))


def test_a_connection_that_sends_nothing_is_closed_after_head_seconds(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), BOUNDS) as relay, \
            socket.create_connection(address(relay)) as idle:
        assert closed_by_the_relay(idle)


def test_a_head_sent_a_byte_at_a_time_is_cut_at_head_seconds(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), BOUNDS) as relay, \
            socket.create_connection(address(relay)) as slow, ThreadPoolExecutor(1) as pool:
        pool.submit(trickle, slow, b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: 1\r\n" * 20 + b"\r\n", 20)
        assert closed_by_the_relay(slow)
        assert "the request head took more than 1 s" in relay.log()


def test_a_body_sent_a_byte_at_a_time_is_cut_at_body_seconds(db_dsn: str, iam_file: Path) -> None:
    body = json.dumps({"name": "slow"}).encode()
    head = (f"POST /api/compute/sites/create HTTP/1.1\r\nHost: x\r\nX-Better-Compute: 1\r\n"
            f"Authorization: Bearer {ALICE}\r\nX-Tenant-Id: {TENANT}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with running_relay(db_dsn, static_iam(iam_file), BOUNDS) as relay, \
            socket.create_connection(address(relay)) as slow, ThreadPoolExecutor(1) as pool:
        slow.sendall(head)
        pool.submit(trickle, slow, body, 20)
        assert closed_by_the_relay(slow)
        assert relay.post("sites.list", {}, ALICE, TENANT).json()["data"] == []  # nothing was created
        assert "the request body took more than 1 s" in relay.log()
        assert "Traceback" not in relay.log()


def test_an_idle_keep_alive_connection_is_closed_and_a_long_answer_is_not_cut(db_dsn: str, iam_file: Path) -> None:
    with running_relay(db_dsn, static_iam(iam_file), BOUNDS + ["--heartbeat-seconds", "0.5"]) as relay:
        with socket.create_connection(address(relay)) as kept:
            kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert kept.recv(4096).startswith(b"HTTP/1.1 200")
            assert closed_by_the_relay(kept)
        with relay.client() as client, watch(client) as response:  # bounds on receiving, not on answering
            lines = response.iter_lines()
            started = time.monotonic()
            while time.monotonic() - started < 3:  # three times every bound
                assert next(line for line in lines if line) == ": heartbeat"


def test_a_head_over_head_bytes_is_431_at_once_or_in_pieces(relay: Relay) -> None:
    bound = HttpBounds().head_bytes
    assert httpx.get(relay.url + "/health", headers={"X-Filler": "x" * (bound // 2)}).status_code == 200
    refused = httpx.get(relay.url + "/health", headers={"X-Filler": "x" * bound})
    assert refused.status_code == 431 and error_of(refused)["code"] == "INVALID_ARGUMENT"
    with socket.create_connection(address(relay)) as pieces:
        pieces.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(bound // 1000 + 1):
                pieces.sendall(b"X-Filler: " + b"x" * 1000 + b"\r\n")
                time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass
        pieces.settimeout(CLOSE_WITHIN)
        assert pieces.recv(4096).startswith(b"HTTP/1.1 431")


def test_connections_beyond_max_connections_are_refused_with_503(db_dsn: str, iam_file: Path) -> None:
    bounds = BOUNDS[:1] + ["10"] + BOUNDS[2:]  # idle connections stay long enough to fill the bound
    with running_relay(db_dsn, static_iam(iam_file), bounds) as relay:
        held = [socket.create_connection(address(relay)) for _ in range(4)]
        try:
            with socket.create_connection(address(relay)) as beyond:
                beyond.settimeout(CLOSE_WITHIN)
                answer = beyond.recv(4096)
                assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 2" in answer.lower()
                assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "UNAVAILABLE"
                assert closed_by_the_relay(beyond)
        finally:
            for connection in held:
                connection.close()
        wait_until(lambda: httpx.get(relay.url + "/health").status_code == 200, 10, "the connections to be freed")


# -- resolver, health, metrics, openapi -----------------------------------------------------------------------

def test_a_webhook_secret_reaches_the_database_only_sealed(relay: Relay, db: psycopg.Connection) -> None:
    """Issue 11 C3: the relay seals webhooks.create's secret to the worker's key before api.prepare,
    so neither the admission (its input, IAM's attributes), nor the webhook row, nor the audit or
    the events, nor the log hold it; the worker's key opens the box to the secret; a retry under
    the same idempotency key seals to the same box, so it replays instead of mismatching."""
    plaintext = f"tenant-webhook-secret-{uuid.uuid4().hex}"
    document = {"url": "https://hooks.example.com/sealed", "secret": plaintext, "idempotency_key": "hook-1"}
    created = relay.data("webhooks.create", document, ALICE, TENANT)
    assert relay.data("webhooks.create", document, ALICE, TENANT) == created
    db.rollback()
    stored = db.execute("""
        SELECT (SELECT string_agg(input::text || attributes::text || coalesce(result::text, ''), ' ') FROM compute.admissions)
            || (SELECT string_agg(to_jsonb(w)::text, ' ') FROM compute.webhooks AS w)
            || (SELECT string_agg(to_jsonb(e)::text, ' ') FROM compute.audit_events AS e)
            || (SELECT string_agg(payload::text, ' ') FROM compute.outbox)""").fetchone()[0]
    assert plaintext not in stored and plaintext not in relay.log()
    secret, key_id, box = db.execute("SELECT secret, secret_key_id, secret_sealed FROM compute.webhooks WHERE webhook_id = %s",
                                     (created["webhook_id"],)).fetchone()
    assert secret is None and WEBHOOK_KEYS.open(key_id, bytes(box)) == plaintext
    both = relay.post("webhooks.create", {**document, "sealed_secret": WEBHOOK_KEYS.seal(plaintext).text()}, ALICE, TENANT)
    assert both.status_code == 400 and "not both" in error_of(both)["message"]


def test_the_resolver_answers_only_with_the_shared_secret(relay: Relay, db_dsn: str, iam_file: Path) -> None:
    site = relay.data("sites.create", {"name": "resolved"}, ALICE, TENANT)
    url = relay.url + "/api/compute/iam/resolve"
    document = {"type": "compute-site", "id": site["site_id"]}
    answer = httpx.post(url, json=document, headers={"Authorization": f"Bearer {SECRET}"})
    assert answer.status_code == 200
    assert answer.json()["data"]["tenantId"] == TENANT
    wrong = httpx.post(url, json=document, headers={"Authorization": f"Bearer {ALICE}"})
    assert wrong.status_code == 403 and error_of(wrong)["code"] == "ACCESS_DENIED"
    missing = httpx.post(url, json={"type": "compute-site", "id": str(uuid.uuid4())},
                         headers={"Authorization": f"Bearer {SECRET}"})
    assert missing.status_code == 404
    with running_relay(db_dsn, static_iam(iam_file)) as without_secret:
        assert httpx.post(without_secret.url + "/api/compute/iam/resolve", json=document).status_code == 404


def test_health_checks_the_database(relay: Relay) -> None:
    response = httpx.get(relay.url + "/health")
    assert response.status_code == 200
    assert response.json()["data"]["status"] == "ok"


def assert_unavailable(response: httpx.Response) -> None:
    """503 UNAVAILABLE with Retry-After: what a client retries (never a 500)."""
    assert response.status_code == 503, response.text
    assert error_of(response)["code"] == "UNAVAILABLE"
    assert int(response.headers["retry-after"]) > 0


def terminate_backends(db: psycopg.Connection) -> int:
    """pg_terminate_backend for every other session on this database (the relay's pool and LISTEN)."""
    return len(db.execute("""SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                              WHERE datname = current_database() AND pid <> pg_backend_pid()""").fetchall())


def test_a_call_on_a_connection_the_database_ended_is_503_unavailable(relay: Relay, db: psycopg.Connection) -> None:
    assert relay.post("sites.list", {}, ALICE, TENANT).status_code == 200
    db.commit()
    assert terminate_backends(db) > 0
    assert_unavailable(relay.post("sites.list", {}, ALICE, TENANT))  # the pool hands out the connection it had
    wait_until(lambda: relay.post("sites.list", {}, ALICE, TENANT).status_code == 200, 10, "a new connection")
    assert "SQLSTATE=None" not in relay.log()


def test_a_database_restart_is_503_unavailable_with_retry_after(db_dsn: str, iam_file: Path,
                                                                pg_server: embedded.Cluster) -> None:
    with running_relay(db_dsn, static_iam(iam_file), ["--pool-timeout", "1"]) as relay:
        assert relay.post("sites.list", {}, ALICE, TENANT).status_code == 200
        pg_server.stop()
        try:
            for _ in range(3):
                assert_unavailable(relay.post("sites.list", {}, ALICE, TENANT))
            assert_unavailable(httpx.get(relay.url + "/health"))
            with relay.client() as client, watch(client) as response:
                assert_unavailable(response.read() and response)
        finally:
            pg_server.start()
        wait_until(lambda: relay.post("sites.list", {}, ALICE, TENANT).status_code == 200, 20, "the database back")
        assert "SQLSTATE=None" not in relay.log()


def test_metrics_label_requests_by_catalog_method_only(relay: Relay) -> None:
    relay.post("sites.list", {}, ALICE, TENANT)
    relay.post("sites.create", {"name": 1}, ALICE, TENANT)
    for path in (f"/api/compute/made/up{number}" for number in range(5)):
        httpx.post(relay.url + path, headers=headers(ALICE, TENANT), json={})
    assert metric(relay, "bc_relay_requests_total", method="sites.list", status="200") == 1
    assert metric(relay, "bc_relay_requests_total", method="sites.create", status="400") == 1
    assert metric(relay, "bc_relay_requests_total", method="unknown", status="404") == 5
    assert metric(relay, "bc_relay_iam_decisions_total", outcome="allow") == 1
    text = httpx.get(relay.url + "/metrics").text
    assert "bc_relay_request_seconds_bucket" in text
    assert not re.search(r'method="made', text)


def test_openapi_has_one_post_per_catalog_method(relay: Relay, db: psycopg.Connection) -> None:
    document = httpx.get(relay.url + "/api/compute/openapi.json").json()
    catalog = db.execute("SELECT method, input_schema FROM api.catalog()").fetchall()
    assert document["openapi"].startswith("3.1")
    assert len(document["paths"]) == len(catalog)
    for method, schema in catalog:
        operation = document["paths"]["/api/compute/" + method.replace(".", "/", 1)]["post"]
        assert operation["operationId"] == method
        assert operation["requestBody"]["content"]["application/json"]["schema"] == schema
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "The caller's credential, passed to IAM as it is."}


def test_every_link_of_the_document_follows_a_key_its_method_answers(relay: Relay, db: psycopg.Connection) -> None:
    """A creating method's 200 links (api.catalog_links) say the new id is in the answer's data under
    the key the target method takes, a listing method's that its first item carries it: create one
    of each, list them, and check the document's every link."""
    def post_of(method: str) -> dict[str, Any]:
        return document["paths"]["/api/compute/" + method.replace(".", "/", 1)]["post"]

    document = httpx.get(relay.url + "/api/compute/openapi.json").json()
    answers = one_of_each(relay, db, "linked", gpus=2)
    pool = answers["pools.create"]["pool_id"]
    relay.data("offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 1, "max_duration_seconds": 86400,
                                    "instance_kind": "vps", "vcpus_per_atom": 8, "memory_mib_per_atom": 65536}, ALICE, TENANT)
    answers["instances.create"] = relay.data("instances.create", {
        "pool_id": pool, "gpus": 1, "image": "debian-12.raw", "ssh_keys": ["ssh-ed25519 AAAA alice@laptop"],
        "end": answers["reservations.create"]["end"]}, ALICE, TENANT)
    agent = relay.data("machines.registerAgent", {"site_id": answers["sites.create"]["site_id"], "name": "agent-1",
                                                  "public_key": base64.b64encode(AGENT_KEY).decode()}, ALICE, TENANT)
    answers["machines.enroll"] = relay.data("machines.enroll", enrollment(pool, agent["agent_id"], "bm-01"), ALICE, TENANT)
    lists = ["sites.list", "pools.list", "nodes.list", "joinTokens.list", "webhooks.list", "reservations.list",
             "capacity.rollup", "instances.list", "machines.list"]
    answers |= {method: relay.data(method, {}, ALICE, TENANT) for method in lists}
    linked = {method: post_of(method)["responses"]["200"].get("links", {}) for method in document_methods(document)}
    assert {method for method, links in linked.items() if links} == set(answers)
    for method, links in linked.items():
        for target, link in links.items():
            [(key, expression)] = link["requestBody"].items()
            first = "0/" if method in lists else ""
            assert (link["operationId"], expression) == (target, f"$response.body#/data/{first}{key}")
            answer = answers[method][0] if method in lists else answers[method]
            assert key in answer, f"{method} answers no {key} for {target}"
            assert key in post_of(target)["requestBody"]["content"]["application/json"]["schema"]["properties"]


def one_of_each(relay: Relay, db: psycopg.Connection, site_name: str, gpus: int) -> dict[str, Any]:
    """Through the API: a site and a pool with a node of `gpus` GPUs (site_and_pool_offering_gpus),
    a join token, a webhook and a reservation of one GPU for an hour; each creating method's answer."""
    site, pool = site_and_pool_offering_gpus(relay, db, site_name, gpus=gpus)
    end = (db.execute("SELECT compute.compute_now()").fetchone()[0] + timedelta(hours=1)).isoformat()
    return {
        "sites.create": site,
        "pools.create": pool,
        "joinTokens.create": relay.data("joinTokens.create", {"pool_id": pool["pool_id"]}, ALICE, TENANT),
        "webhooks.create": relay.data("webhooks.create", {"url": "https://hooks.example.com/bc", "secret": "s" * 32},
                                      ALICE, TENANT),
        "reservations.create": relay.data("reservations.create", {"pool_id": pool["pool_id"], "shape": "gpu", "count": 1,
                                                                  "end": end}, ALICE, TENANT),
    }


def document_methods(document: dict[str, Any]) -> list[str]:
    return [path["post"]["operationId"] for path in document["paths"].values()]


def test_schemathesis_finds_no_server_error_and_answers_match_the_document(relay: Relay, db: psycopg.Connection,
                                                                          tmp_path: Path) -> None:
    """Fuzz every method through the generated document, and chain calls along its links: no 5xx
    but 501 UNSUPPORTED (tests/schemathesis.toml), every status and body as documented, and no
    refusal turns into a traceback in the log. The tenant already has a pool with a node, a
    reservation, a join token and a webhook, so the links from lists reach the methods on them (no
    method creates a node: nodes join through the gateway)."""
    one_of_each(relay, db, "fuzzed", gpus=2)
    checks = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(SCHEMATHESIS_CONFIG), "run",
         relay.url + "/api/compute/openapi.json", "--checks", checks,
         "--max-examples", FUZZ_EXAMPLES, "-H", f"Authorization: Bearer {ALICE}", "-H", f"X-Tenant-Id: {TENANT}",
         "--workers", "1", "--request-timeout", "10", "--generation-database", "none",
         *([] if FUZZ_SEED == "random" else ["--seed", FUZZ_SEED])],
        capture_output=True, text=True, timeout=240 * max(1, int(FUZZ_EXAMPLES) // 10), cwd=tmp_path)  # its .schemathesis/ cache stays out of the repo
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:] + relay.tail()
    assert "Traceback" not in relay.log(), relay.tail()


def test_raising_atoms_per_reservation_changes_what_http_accepts(db_dsn: str, db: psycopg.Connection,
                                                                 iam_file: Path) -> None:
    """The bound of `count` is compute.limits' atoms_per_reservation, read where the catalog is read:
    the relay's pre-check, the OpenAPI document and the database's own check all follow the limit (the
    relay reads the catalog at start-up, so it is restarted to see a raised one)."""
    def count_bound(relay: Relay) -> int:
        document = relay.client().get("/api/compute/openapi.json").json()
        body = document["paths"]["/api/compute/reservations/create"]["post"]["requestBody"]["content"]
        schema = body["application/json"]["schema"]
        return int(schema["properties"]["count"]["maximum"])

    with running_relay(db_dsn, static_iam(iam_file)) as relay:
        _, pool = site_and_pool_offering_gpus(relay, db, "limits", gpus=2)
        end = (db.execute("SELECT compute.compute_now()").fetchone()[0] + timedelta(hours=1)).isoformat()
        request = {"pool_id": pool["pool_id"], "shape": "gpu", "count": 65, "end": end}
        refused = relay.post("reservations.create", request, ALICE, TENANT)
        assert refused.status_code == 400 and error_of(refused)["code"] == "INVALID_ARGUMENT"
        assert "$.count" in error_of(refused)["message"] and "64" in error_of(refused)["message"]
        assert count_bound(relay) == 64

    db.execute("UPDATE compute.limits SET value = 100 WHERE name = 'atoms_per_reservation'")
    db.commit()
    with running_relay(db_dsn, static_iam(iam_file)) as relay:
        assert count_bound(relay) == 100
        relay.data("offerings.create", {"pool_id": pool["pool_id"], "shape": "gpu", "max_count": 100,
                                        "max_duration_seconds": 86400}, ALICE, TENANT)
        accepted = relay.post("reservations.create", request, ALICE, TENANT)
        # The input is valid now; the pool has 2 GPUs, so placement answers that 65 are not free.
        assert accepted.status_code == 409 and error_of(accepted)["code"] == "CAPACITY_CONFLICT", accepted.text


def test_the_relay_answers_the_http_status_the_database_declares(db_dsn: str, db: psycopg.Connection,
                                                                 iam_file: Path) -> None:
    """The relay reads the error contract from the database at start-up: a status changed there (and
    nowhere in Python) is the status HTTP answers."""
    db.execute("UPDATE compute.error_codes SET http_status = 418 WHERE code = 'ALREADY_EXISTS'")
    db.commit()
    with running_relay(db_dsn, static_iam(iam_file)) as relay:
        relay.data("sites.create", {"name": "taken"}, ALICE, TENANT)
        again = relay.post("sites.create", {"name": "taken"}, ALICE, TENANT)
        assert again.status_code == 418 and error_of(again)["code"] == "ALREADY_EXISTS"
