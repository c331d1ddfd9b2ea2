"""Every catalog method through the real relay (a subprocess) against a real database, with a
Better IAM stand-in that counts its calls: each request is decided exactly once; tenant B gets
NOT_FOUND or ACCESS_DENIED, never data, on tenant A's ids; every error code of docs/architecture.md §13 comes
out of at least one HTTP call; a relay killed between prepare and admit leaves nothing held."""

from __future__ import annotations

import base64
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from bare_metal_support import AGENT_KEY, enrollment
from fleet import H200_MODEL, MIG_2X_3G, TIMESLICE_4, WHOLE, register_nodes
from iam_server import IamServer, TokenPolicy
from relay_support import Relay, better_iam, running_relay
from worker_support import register_webhook_key, wait_until

TENANT_A = "aaaaaaaa-0000-4000-8000-000000000001"
TENANT_B = "bbbbbbbb-0000-4000-8000-000000000002"
TOKEN_A, TOKEN_B = "token-of-alice", "token-of-bob"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO4api alice@laptop"
LAYOUTS = [[WHOLE, WHOLE, MIG_2X_3G, TIMESLICE_4], [WHOLE, WHOLE, WHOLE, WHOLE]]


def at(hours: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).replace(microsecond=0).isoformat()


@pytest.fixture
def iam(db: psycopg.Connection) -> Iterator[IamServer]:
    """Better IAM that knows every catalog action; Alice may act in tenant A, Bob in tenant B."""
    actions = tuple(row[0] for row in db.execute("SELECT action FROM api.catalog()"))
    policies = {TOKEN_A: TokenPolicy(TENANT_A), TOKEN_B: TokenPolicy(TENANT_B)}
    with IamServer(mode="policy", policies=policies, catalog=actions, service_token="relay-service-token") as server:
        yield server


@pytest.fixture
def relay(db_dsn: str, iam: IamServer) -> Iterator[Relay]:
    with running_relay(db_dsn, better_iam(iam.url, timeout=5.0)) as running:
        yield running


@dataclass
class Caller:
    """Calls as one tenant; checks that every call that reaches IAM reaches it exactly once."""

    relay: Relay
    iam: IamServer
    token: str
    tenant: str
    called: set[str] = field(default_factory=set)

    def call(self, method: str, document: dict[str, Any], tenant: str | None = None) -> httpx.Response:
        before = self.iam.calls
        response = self.relay.post(method, document, self.token, tenant or self.tenant)
        decided = self.iam.calls - before
        if response.status_code == 200 or response.json()["error"]["code"] == "ACCESS_DENIED":
            assert decided == 1, f"{method}: {decided} IAM calls for one request"
        self.called.add(method)
        return response

    def data(self, method: str, document: dict[str, Any]) -> Any:
        response = self.call(method, document)
        assert response.status_code == 200, f"{method}: {response.status_code} {response.text}\n{self.relay.tail()}"
        return response.json()["data"]

    def error(self, method: str, document: dict[str, Any], tenant: str | None = None) -> tuple[int, str]:
        response = self.call(method, document, tenant)
        assert "data" not in response.json(), f"{method} answered data: {response.text}"
        return response.status_code, response.json()["error"]["code"]


def catalog_methods(db: psycopg.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT method FROM api.catalog()")}


def build_tenant_a(alice: Caller, db: psycopg.Connection) -> dict[str, str]:
    """Tenant A through the API (site, pool, offerings, project, quota, token, webhook, a
    reservation), its nodes registered in SQL (they join by themselves once bcd exists). Returns ids."""
    register_webhook_key(db)  # as a worker does when it starts: webhooks.create seals the secret to it
    db.commit()
    site = alice.data("sites.create", {"name": "berlin"})
    pool = alice.data("pools.create", {"site_id": site["site_id"], "name": "h200", "gpu_model": H200_MODEL})
    register_nodes(db, pool["pool_id"], LAYOUTS)
    db.commit()
    for shape in ("gpu", "mig:3g.71gb", "slot"):
        alice.data("offerings.create", {"pool_id": pool["pool_id"], "shape": shape, "max_count": 8,
                                        "max_duration_seconds": 7 * 86400})
    alice.data("offerings.create", {"pool_id": pool["pool_id"], "shape": "gpu", "max_count": 2, "max_duration_seconds": 86400,
                                    "instance_kind": "vps", "vcpus_per_atom": 8, "memory_mib_per_atom": 65536})
    project = alice.data("projects.create", {"name": "training"})
    alice.data("quotas.set", {"pool_id": pool["pool_id"], "max_atoms": 100, "gpu_hours_per_month": 10000})
    token = alice.data("joinTokens.create", {"pool_id": pool["pool_id"], "ttl_seconds": 600})
    webhook = alice.data("webhooks.create", {"url": "https://hooks.example/a", "secret": "s" * 32})
    reservation = alice.data("reservations.create", {"pool_id": pool["pool_id"], "shape": "gpu", "count": 2,
                                                     "end": at(2), "hold_seconds": 600, "project_id": project["project_id"]})
    instance = alice.data("instances.create", {"pool_id": pool["pool_id"], "gpus": 1, "image": "debian-12.raw",
                                               "ssh_keys": [SSH_KEY], "end": at(2)})
    node_id = alice.data("nodes.list", {"pool_id": pool["pool_id"]})[0]["node_id"]
    agent = alice.data("machines.registerAgent", {"site_id": site["site_id"], "name": "agent-1",
                                                  "public_key": base64.b64encode(AGENT_KEY).decode()})
    machine = alice.data("machines.enroll", enrollment(pool["pool_id"], agent["agent_id"], "bm-01"))
    event_id = db.execute("SELECT max(event_id) FROM compute.audit_events WHERE tenant_id = %s", (TENANT_A,)).fetchone()[0]
    return {"site_id": site["site_id"], "pool_id": pool["pool_id"], "project_id": project["project_id"],
            "token_id": token["token_id"], "webhook_id": webhook["webhook_id"],
            "reservation_id": reservation["reservation_id"], "node_id": node_id, "event_id": event_id,
            "instance_id": instance["instance_id"], "agent_id": agent["agent_id"], "machine_id": machine["machine_id"]}



def test_every_method_works_through_http_with_one_iam_decision_each(relay: Relay, iam: IamServer,
                                                                   db: psycopg.Connection) -> None:
    alice = Caller(relay, iam, TOKEN_A, TENANT_A)
    ids = build_tenant_a(alice, db)
    pool, node, reservation = ids["pool_id"], ids["node_id"], ids["reservation_id"]

    assert [s["name"] for s in alice.data("sites.list", {})] == ["berlin"]
    assert alice.data("sites.get", {"site_id": ids["site_id"]})["name"] == "berlin"
    assert [p["pool_id"] for p in alice.data("pools.list", {"site_id": ids["site_id"]})] == [pool]
    assert {o["shape"] for o in alice.data("pools.get", {"pool_id": pool})["offerings"]} == {"gpu", "mig:3g.71gb", "slot"}
    assert alice.data("pools.update", {"pool_id": pool, "placement_policy": "spread"})["placement_policy"] == "spread"
    assert len(alice.data("offerings.list", {"pool_id": pool})) == 4  # gpu, MIG, slot; and gpu as VPS
    assert [p["name"] for p in alice.data("projects.list", {})] == ["training"]
    assert alice.data("quotas.get", {"pool_id": pool})["max_atoms"] == 100
    assert [t["state"] for t in alice.data("joinTokens.list", {"pool_id": pool})] == ["active"]
    assert alice.data("joinTokens.revoke", {"token_id": ids["token_id"]})["state"] == "revoked"

    assert len(alice.data("nodes.list", {})) == len(LAYOUTS)
    assert len(alice.data("nodes.get", {"node_id": node})["devices"]) == len(LAYOUTS[0])
    assert alice.data("nodes.cordon", {"node_id": node, "reason": "fan"})["flags"] == ["cordoned"]
    assert alice.data("nodes.uncordon", {"node_id": node})["flags"] == []
    assert alice.data("nodes.quarantine", {"node_id": node, "reason": "xid 79"})["flags"] == ["quarantined"]
    assert alice.data("nodes.unquarantine", {"node_id": node, "reason": "reseated"})["flags"] == []
    command = alice.data("nodes.command", {"node_id": node, "kind": "collect_inventory"})
    assert [c["command_id"] for c in alice.data("nodes.commands", {"node_id": node})] == [command["command_id"]]

    free = alice.data("capacity.free", {"pool_id": pool, "shape": "gpu", "start": at(3), "end": at(4)})
    assert sum(n["free_atoms"] for n in free) == 6  # 2 + 4 whole GPUs: the reservation ends before the window
    assert alice.data("capacity.earliest", {"pool_id": pool, "shape": "gpu", "count": 6, "duration_seconds": 3600})["start"]
    assert {r["shape"] for r in alice.data("capacity.rollup", {"pool_id": pool})} == {"gpu", "mig:3g.71gb", "slot"}
    timeline = alice.data("capacity.timeline", {"pool_id": pool, "end": at(4)})
    assert [len(d["atoms"]) for n in timeline["nodes"] for d in n["devices"]] == [1, 1, 2, 4, 1, 1, 1, 1]
    assert reservation in {b.get("reservation_id") for b in timeline["bookings"]}

    assert alice.data("reservations.get", {"reservation_id": reservation})["state"] == "active"
    assert reservation in [r["reservation_id"] for r in alice.data("reservations.list", {"state": "active"})]  # and the VPS's
    extended = alice.data("reservations.extend", {"reservation_id": reservation, "end": at(3)})
    assert alice.data("reservations.renew", {"reservation_id": reservation})["reservation_id"] == reservation
    assert alice.data("reservations.release", {"reservation_id": reservation})["state"] in ("released", "cancelled")
    assert extended["end"] > extended["start"]

    events = alice.data("events.list", {"limit": 1000})["events"]
    assert {"site.created", "pool.created", "reservation.activated"} <= {e["type"] for e in events}
    assert alice.data("audit.proof", {"event_id": ids["event_id"]})
    webhook = ids["webhook_id"]
    assert [w["webhook_id"] for w in alice.data("webhooks.list", {})] == [webhook]
    assert alice.data("webhooks.replay", {"webhook_id": webhook})["replayed"] == 0
    assert alice.data("webhooks.delete", {"webhook_id": webhook})["active"] is False
    assert alice.data("nodes.drain", {"node_id": node, "reason": "maintenance"})["flags"] == ["draining"]

    instance = ids["instance_id"]
    shown = alice.data("instances.show", {"instance_id": instance})
    assert shown["state"] == "provisioning" and len(shown["gpus"]) == 1
    assert [i["instance_id"] for i in alice.data("instances.list", {})] == [instance]
    assert alice.data("instances.consoleUrl", {"instance_id": instance})["domain"] == f"bc-{instance}"
    db.execute("SELECT compute.instances_observed(%s, %s)",  # the node ran it (a verified node.observed report)
               (shown["node_id"], Jsonb([{"instance_id": instance, "generation": 1, "state": "running"}])))
    db.commit()
    assert alice.data("instances.reboot", {"instance_id": instance})["generation"] == 2
    assert alice.data("instances.stop", {"instance_id": instance})["state"] == "stopped"
    assert alice.data("instances.start", {"instance_id": instance})["state"] == "running"
    assert alice.data("instances.delete", {"instance_id": instance})["state"] == "deleting"

    machine = ids["machine_id"]  # no site agent runs: the moves an operator makes, without a BMC operation done
    assert [a["agent_id"] for a in alice.data("machines.agents", {"site_id": ids["site_id"]})] == [ids["agent_id"]]
    assert alice.data("machines.manage", {"machine_id": machine})["state"] == "verifying"
    assert alice.data("machines.abort", {"machine_id": machine, "reason": "wrong rack"})["state"] == "verify_failed"
    assert alice.data("machines.retry", {"machine_id": machine})["state"] == "verifying"
    assert alice.error("machines.provide", {"machine_id": machine}) == (400, "INVALID_ARGUMENT")  # not verified
    assert alice.error("machines.release", {"machine_id": machine}) == (400, "INVALID_ARGUMENT")  # not active
    assert [(m["name"], m["state"]) for m in alice.data("machines.list", {"pool_id": pool})] == [("bm-01", "verifying")]
    assert alice.data("machines.show", {"machine_id": machine})["credentials_version"] == 1

    assert alice.called == catalog_methods(db), f"methods without an HTTP test: {catalog_methods(db) - alice.called}"


def probe_input(schema: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """A valid input naming tenant A's ids wherever the method takes one."""
    filler: dict[str, Any] = {"reason": "probe", "shape": "gpu", "count": 1, "end": at(5), "name": "probe",
                              "gpu_model": H200_MODEL, "placement_policy": "spread", "max_count": 1,
                              "max_duration_seconds": 60, "duration_seconds": 60, "kind": "reboot", "url": "https://hooks.example/b",
                              "secret": "s" * 32, "gpus": 1, "image": "probe.raw", "ssh_keys": [SSH_KEY],
                              **enrollment(ids["pool_id"], ids["agent_id"], "probe"),
                              "public_key": base64.b64encode(AGENT_KEY).decode(), **ids}
    properties = schema["properties"]
    return {key: value for key, value in filler.items() if key in properties}


def test_tenant_b_gets_nothing_of_tenant_a(relay: Relay, iam: IamServer, db: psycopg.Connection) -> None:
    ids = build_tenant_a(Caller(relay, iam, TOKEN_A, TENANT_A), db)
    bob = Caller(relay, iam, TOKEN_B, TENANT_B)
    schemas = {row[0]: row[1] for row in db.execute("SELECT method, input_schema FROM api.catalog()")}
    for method, schema in sorted(schemas.items()):
        document = probe_input(schema, ids)
        # In his own tenant, Bob's calls on A's ids are NOT_FOUND (lists: nothing of A's).
        response = bob.call(method, document)
        if response.status_code == 200:
            assert not set(map(str, ids.values())) & set(str(response.json()["data"]).split("'")), (method, response.text)
        else:
            assert (response.status_code, response.json()["error"]["code"]) in ((404, "NOT_FOUND"), (403, "ACCESS_DENIED")), \
                (method, response.text)
        # Claiming tenant A, IAM denies him: ACCESS_DENIED, never data.
        assert bob.error(method, document, tenant=TENANT_A) == (403, "ACCESS_DENIED"), method
    unchanged = db.execute("""SELECT (SELECT state FROM compute.reservations WHERE reservation_id = %(reservation_id)s),
                                     (SELECT count(*) FROM compute.node_flags WHERE node_id = %(node_id)s),
                                     (SELECT state FROM compute.join_tokens WHERE token_id = %(token_id)s),
                                     (SELECT active FROM compute.webhooks WHERE webhook_id = %(webhook_id)s),
                                     (SELECT placement_policy FROM compute.pools WHERE pool_id = %(pool_id)s)""", ids).fetchone()
    assert unchanged == ("active", 0, "active", True, "pack")
    assert db.execute("""SELECT count(*) FROM compute.admissions WHERE tenant_id = %s AND state = 'admitted'
                          AND principal = 'user:bob'""", (TENANT_A,)).fetchone()[0] == 0


def test_every_error_code_of_the_contract_comes_out_of_http(relay: Relay, iam: IamServer, db: psycopg.Connection) -> None:
    alice = Caller(relay, iam, TOKEN_A, TENANT_A)
    ids = build_tenant_a(alice, db)
    pool = ids["pool_id"]
    seen: dict[str, int] = {}

    def expect(code: str, status: int, method: str, document: dict[str, Any], caller: Caller = alice) -> None:
        assert caller.error(method, document) == (status, code), (method, document)
        seen[code] = status

    expect("INVALID_ARGUMENT", 400, "sites.create", {"name": "Not A Name"})
    expect("ACCESS_DENIED", 403, "sites.list", {}, Caller(relay, iam, "stolen-token", TENANT_A))
    expect("NOT_FOUND", 404, "sites.get", {"site_id": str(uuid.uuid4())})
    expect("CAPACITY_CONFLICT", 409, "reservations.create", {"pool_id": pool, "shape": "gpu", "count": 8, "end": at(1)})
    reservation = alice.data("reservations.get", {"reservation_id": ids["reservation_id"]})
    expect("GENERATION_CONFLICT", 409, "reservations.extend",
           {"reservation_id": ids["reservation_id"], "end": at(4), "expected_end": at(9)})
    assert reservation["state"] == "active"
    alice.data("projects.create", {"name": "once", "idempotency_key": "key-1"})
    expect("IDEMPOTENCY_MISMATCH", 422, "projects.create", {"name": "twice", "idempotency_key": "key-1"})
    expect("ALREADY_EXISTS", 409, "projects.create", {"name": "once"})
    alice.data("quotas.set", {"pool_id": pool, "max_atoms": 2})
    expect("QUOTA_EXCEEDED", 429, "reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1, "end": at(1)})
    expect("UNSUPPORTED", 501, "capacity.free", {"pool_id": pool, "shape": "bare_metal", "end": at(2)})
    # FENCED: the decision arrives after the admission's bound.
    db.execute("UPDATE compute.limits SET value = 1 WHERE name = 'admission_seconds'")
    db.commit()
    iam.configure(delay=1.5)
    expect("FENCED", 409, "projects.create", {"name": "late"})
    iam.configure(delay=0.0)

    assert seen == dict(db.execute("SELECT code, http_status FROM compute.error_codes").fetchall())


def post_to_a_dying_relay(relay: Relay, document: dict[str, Any]) -> None:
    with pytest.raises(httpx.RemoteProtocolError):  # the relay dies before it answers
        relay.post("reservations.create", document, TOKEN_A, TENANT_A)


def test_a_relay_killed_between_prepare_and_admit_leaves_nothing_held(db_dsn: str, iam: IamServer,
                                                                      db: psycopg.Connection) -> None:
    with running_relay(db_dsn, better_iam(iam.url, timeout=30.0)) as relay:
        ids = build_tenant_a(Caller(relay, iam, TOKEN_A, TENANT_A), db)
        db.execute("UPDATE compute.limits SET value = 1 WHERE name = 'admission_seconds'")
        db.commit()
        iam.configure(delay=20.0)
        asked = iam.calls
        document = {"pool_id": ids["pool_id"], "shape": "gpu", "count": 3, "end": at(1)}  # the free whole GPUs
        request = threading.Thread(target=post_to_a_dying_relay, daemon=True, args=(relay, document))
        request.start()
        wait_until(lambda: iam.calls > asked, 10, "the relay to ask IAM")  # prepared: the provisional rows exist, IAM is deciding
        held = db.execute("SELECT count(*) FROM compute.bookings JOIN compute.reservations USING (reservation_id) "
                          "WHERE reservations.state = 'provisional'").fetchone()[0]
        db.commit()
        assert held == 3
        relay.process.send_signal(signal.SIGKILL)
        relay.process.wait()
    time.sleep(1.1)  # past admission_seconds
    db.execute("SELECT compute.admissions_expire()")  # what the worker's admissions.expire sweep runs
    db.commit()
    live = db.execute("""SELECT count(*) FROM compute.bookings b JOIN compute.reservations r USING (reservation_id)
                          WHERE r.reservation_id <> %s AND r.instance_kind <> 'vps' AND b.state = 'held'""",
                      (ids["reservation_id"],)).fetchone()[0]
    assert live == 0
    assert db.execute("SELECT state FROM compute.admissions WHERE method = 'reservations.create' ORDER BY created_at DESC LIMIT 1"
                      ).fetchone()[0] == "expired"
