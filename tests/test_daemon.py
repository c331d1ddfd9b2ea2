"""The node daemon's runtime (better_compute.daemon.runtime, state, join) and the simulator.

The Daemon core is driven message by message with real keys (a CA in tmp_path, the control
plane's Ed25519 intent key, the node's P-256 key), the fake driver and real files: a verified spec
becomes the CDI file and a signed `observed`; a spec or command that does not verify, or names
another node, changes nothing; a command id executes once, also across a restart (the journal).

End to end, real `bcd join` / `bcd run` processes (fake driver) talk to the real gateway and worker
(tests/gateway_support.py): the node is adopted, a reservation made through the API functions
shows up in its CDI file within seconds and goes away on release, a command delivered twice runs
once, a killed daemon changes nothing in the database, and `sim nodes` runs several nodes at once.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg.types.json import Jsonb
from typer.testing import CliRunner
from websockets.asyncio.client import connect

from better_compute.daemon import app
from better_compute.daemon.drivers import InventoryError, fake
from better_compute.daemon.journal import Journal
from better_compute.daemon.runtime import Backoff, Daemon, endpoint, renew, run
from better_compute.daemon.state import CERT_FILE, KEY_FILE, NodeState, NotJoined
from better_compute.nodeproto import (FENCED, INVENTORY_REPORT, OBSERVED_REPORT, RESULT_REPORT, SESSION_PATH,
                                      Certificate, Command, Error, Hello, Inventory, Joined, Message, Observed, Renew,
                                      Result, Spec, decode, intent_key_text)
from better_compute.pki import (CertificateAuthority, IntentSigner, PkiError, generate_node_key, issue_svid, make_csr,
                                open_envelope, read_csr, sign_envelope)
from better_compute.sim import mint_tokens
from fleet import h200_inventory, make_pool
from gateway_support import REPO, GatewayProcess, running_gateway, running_worker_process
from node_support import (H200_INVENTORY, SECONDS, STOP_SECONDS, JoinedNode, bcd, converged, fake_driver, join_node,
                          running_bcd, spec_state, wait_until)
from test_cdi import check
from test_cdi_driver_files import hook_binary

TRUST_DOMAIN = "fleet.example.com"
HOSTNAME = "sim-0001"
NOW = datetime.now(timezone.utc).replace(microsecond=0)  # real time: certificates are checked by the wall clock
GPU = fake.gpu_uuid(HOSTNAME, 0)
PROCESSES = [{"pid": 4242, "gpu_uuid": GPU, "used_memory_mib": 1024, "gi": None, "ci": None}]


class FlakyDriver(fake.Driver):
    """The fake driver, whose collect fails while `broken` (as nvidia-smi does when the driver is gone)."""

    broken = False

    def collect(self) -> dict[str, Any]:
        if self.broken:
            raise InventoryError("nvidia-smi: not found")
        return super().collect()


@dataclass
class Node:
    """A joined node's state directory, the control plane's keys, and the Daemon on them."""

    tmp: Path
    ca: CertificateAuthority
    intent: IntentSigner
    state: NodeState
    driver: FlakyDriver
    node_id: uuid.UUID

    @property
    def cdi_path(self) -> Path:
        return self.tmp / "cdi" / "better-compute.yaml"

    def daemon(self, clock: datetime = NOW) -> Daemon:
        """A Daemon as a (re)started `bcd run` makes it: credentials and journal read from disk."""
        return Daemon(self.state, self.driver, self.cdi_path, lambda: clock)

    def spec(self, generation: int, *devices: dict[str, Any], node_id: uuid.UUID | None = None) -> Spec:
        body = {"node_id": str(node_id or self.node_id), "generation": generation,
                "spec": {"node_id": str(node_id or self.node_id), "devices": list(devices)}}
        return Spec(self.intent.sign("spec", body))

    def command(self, kind: str) -> Command:
        return Command(self.intent.sign("command", {"command_id": str(uuid.uuid4()), "node_id": str(self.node_id),
                                                     "kind": kind, "args": {}}))

    def opened(self, message: Message) -> dict[str, Any]:
        """What the node reported, verified with the key of its certificate, less the report's
        node id, epoch and sequence number (report_numbers)."""
        assert isinstance(message, (Observed, Result, Inventory)), message
        body = open_envelope(message.envelope, self.state.load().certificate.public_key(), REPORT_OF[type(message)])
        assert body["node_id"] == str(self.node_id)
        return {name: value for name, value in body.items() if name not in ("node_id", "epoch", "seq")}

    def cdi_devices(self) -> list[str]:
        return [device["name"] for device in yaml.safe_load(self.cdi_path.read_text())["devices"]]


def joined(ca: CertificateAuthority, intent: IntentSigner, key: Any, node_id: uuid.UUID) -> Joined:
    certificate = issue_svid(ca, make_csr(key, HOSTNAME), node_id, NOW)
    return Joined(str(node_id), certificate, pem(ca.certificate), intent_key_text(intent.private_key.public_key()),
                  TRUST_DOMAIN)


def pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


REPORT_OF = {Observed: OBSERVED_REPORT, Result: RESULT_REPORT, Inventory: INVENTORY_REPORT}


@pytest.fixture
def node(tmp_path: Path) -> Node:
    ca = CertificateAuthority.open(tmp_path / "ca" / "ca.key", TRUST_DOMAIN, NOW)
    intent = IntentSigner(tmp_path / "ca" / "intent.key")
    state = NodeState(tmp_path / "state")
    node_id = uuid.uuid4()
    state.save_joined(joined(ca, intent, state.key(), node_id), HOSTNAME, NOW)
    driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME, processes=PROCESSES)
    return Node(tmp_path, ca, intent, state, driver, node_id)


def gpu_booking(uuid_: str = GPU, reservation: str = "r-1", booking_id: int = 1) -> dict[str, Any]:
    return {"device_uuid": uuid_, "index": 0, "kind": "gpu", "profile": None, "placement": None, "slot": None,
            "cdi_name": f"nvidia.com/gpu={uuid_}", "reservation_id": reservation, "until": "2030-01-01T00:00:00+00:00",
            "booking_id": booking_id}


# -- the state directory ----------------------------------------------------------------------------

def test_the_state_directory_keeps_a_private_key_and_the_identity(node: Node) -> None:
    assert stat.S_IMODE((node.state.directory / KEY_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(node.state.directory.stat().st_mode) == 0o700
    credentials = node.state.load()
    assert (credentials.node_id, credentials.trust_domain, credentials.hostname) == (node.node_id, TRUST_DOMAIN,
                                                                                     HOSTNAME)
    assert credentials.intent_key == node.intent.private_key.public_key()
    assert credentials.certificate.public_key() == credentials.key.public_key()
    assert node.state.session_tls() is not None  # OpenSSL takes the key and certificate files
    assert sorted(path.name for path in node.state.directory.iterdir() if path.name.startswith(".")) == []


def test_an_empty_state_directory_is_not_joined(tmp_path: Path) -> None:
    state = NodeState(tmp_path / "fresh")
    assert not state.joined
    with pytest.raises(NotJoined, match="bcd join"):
        state.load()


def test_join_answers_for_another_key_or_node_are_not_kept(node: Node, tmp_path: Path) -> None:
    state = NodeState(tmp_path / "other")
    stranger = generate_node_key()
    with pytest.raises(PkiError, match="not for this node's key"):
        state.save_joined(joined(node.ca, node.intent, stranger, uuid.uuid4()), HOSTNAME, NOW)
    answer = joined(node.ca, node.intent, state.key(), uuid.uuid4())
    with pytest.raises(PkiError, match="not node"):
        state.save_joined(Joined(str(uuid.uuid4()), answer.certificate, answer.ca, answer.intent_key, TRUST_DOMAIN),
                          HOSTNAME, NOW)
    assert not state.joined


# -- specs ----------------------------------------------------------------------------------------------

def test_a_signed_spec_becomes_the_cdi_file_and_a_signed_observed(node: Node) -> None:
    daemon = node.daemon()
    [observed] = daemon.handle(node.spec(3, gpu_booking()))
    assert node.opened(observed) == {"generation": 3, "conditions": [], "devices": [{"booking_id": 1, "state": "exposed", "reason": None}],
                                     "withdrawal": {"stopped": [], "in_use": []}}
    assert node.cdi_devices() == [GPU]
    assert daemon.specs_applied == 1
    assert Journal(node.state.directory).last_generation == 3


def test_a_spec_without_bookings_removes_the_cdi_file(node: Node) -> None:
    daemon = node.daemon()
    daemon.handle(node.spec(1, gpu_booking()))
    [observed] = daemon.handle(node.spec(2))
    assert node.opened(observed)["generation"] == 2
    assert not node.cdi_path.exists()


def test_a_cdi_file_edited_or_removed_on_the_node_is_rewritten_from_the_last_spec(node: Node) -> None:
    daemon = node.daemon()
    assert not daemon.repair_drift()  # nothing applied yet: nothing to compare with
    daemon.handle(node.spec(1, gpu_booking()))
    converged = node.cdi_path.read_bytes()
    assert not daemon.repair_drift()  # in step: untouched
    node.cdi_path.write_text("devices: []\n")
    assert daemon.repair_drift() and node.cdi_path.read_bytes() == converged
    node.cdi_path.unlink()
    assert daemon.repair_drift() and node.cdi_path.read_bytes() == converged


def test_an_older_generation_is_skipped_and_the_same_one_reported_again(node: Node) -> None:
    daemon = node.daemon()
    daemon.handle(node.spec(5, gpu_booking()))
    before = node.cdi_path.read_bytes()
    assert daemon.handle(node.spec(4)) == []
    assert node.cdi_path.read_bytes() == before
    [again] = node.daemon().handle(node.spec(5, gpu_booking()))  # restarted: the journal knows 5
    assert node.opened(again)["generation"] == 5 and node.cdi_path.read_bytes() == before


def tampered(node: Node) -> Spec:
    spec = node.spec(2, gpu_booking())
    envelope = copy.deepcopy(spec.envelope)
    envelope["body"]["spec"]["devices"][0]["cdi_name"] = "nvidia.com/gpu=GPU-someone-elses"
    return Spec(envelope)


def signed_by_a_stranger(node: Node) -> Spec:
    body = node.spec(2, gpu_booking()).envelope["body"]
    return Spec(sign_envelope("spec", body, Ed25519PrivateKey.generate()))


def signed_by_the_node(node: Node) -> Spec:
    """Signed, but by the node's own key: only the control plane's intent key signs intent."""
    return Spec(sign_envelope("spec", node.spec(2, gpu_booking()).envelope["body"], node.state.load().key))


def for_another_node(node: Node) -> Spec:
    return node.spec(2, gpu_booking(), node_id=uuid.uuid4())


def a_command_as_a_spec(node: Node) -> Spec:
    return Spec(node.intent.sign("command", node.spec(2, gpu_booking()).envelope["body"]))


@pytest.mark.parametrize("forge", [tampered, signed_by_a_stranger, signed_by_the_node, for_another_node,
                                   a_command_as_a_spec])
def test_a_spec_that_does_not_verify_for_this_node_is_not_applied(node: Node, forge: Any,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    daemon = node.daemon()
    daemon.handle(node.spec(1))
    [answer] = daemon.handle(forge(node))
    assert isinstance(answer, Error) and answer.code == "INVALID_ARGUMENT"
    assert not node.cdi_path.exists()
    assert Journal(node.state.directory).last_generation == 1 and daemon.specs_applied == 1
    assert "not applied" in caplog.text


def test_a_booking_the_inventory_cannot_back_is_a_condition(node: Node) -> None:
    gone = fake.gpu_uuid(HOSTNAME, 7)
    [observed] = node.daemon().handle(node.spec(2, gpu_booking(), gpu_booking(gone, "r-2")))
    [condition] = node.opened(observed)["conditions"]
    assert condition["type"] == "DevicesUnresolved" and condition["devices"] == [f"nvidia.com/gpu={gone}"]
    assert node.cdi_devices() == [GPU]


LEGACY_MIG = f"MIG-{GPU}/2/0"  # a MIG UUID as drivers before R470 print it: no CDI device name


def test_an_unwritable_device_costs_only_itself_and_a_released_one_leaves_at_once(node: Node) -> None:
    """Fail closed: a spec with one device the daemon cannot write (a name CDI refuses) and one
    booking released since. The released device leaves the file; the condition names the bad one."""
    daemon = node.daemon()
    daemon.handle(node.spec(1, gpu_booking()))
    assert node.cdi_devices() == [GPU]
    unwritable = gpu_booking(reservation="r-2") | {"kind": "mig", "profile": "1g.18gb", "placement": 2,
                                                   "cdi_name": f"nvidia.com/gpu={LEGACY_MIG}", "mig_uuid": LEGACY_MIG}
    [observed] = daemon.handle(node.spec(2, unwritable))
    assert not node.cdi_path.exists()  # r-1 was released: its GPU is gone
    body = node.opened(observed)
    assert body["generation"] == 2
    [condition] = body["conditions"]
    assert condition["type"] == "DevicesNotWritable" and condition["devices"] == [f"nvidia.com/gpu={LEGACY_MIG}"]
    assert "not a CDI device name" in condition["message"]


def test_a_spec_that_cannot_be_applied_reports_the_last_applied_generation(node: Node) -> None:
    """When the inventory cannot be read, what the current spec still grants stays in the file, and
    what it no longer grants leaves it: a stale file is never right."""
    two_gpus = node.tmp / "two-gpus.json"
    two_gpus.write_text(json.dumps(h200_inventory("recorded", 2)))
    node.driver = FlakyDriver(two_gpus, hostname=HOSTNAME)
    other = fake.gpu_uuid(HOSTNAME, 1)
    daemon = node.daemon()
    assert node.opened(daemon.handle(node.spec(1, gpu_booking(), gpu_booking(other, "r-2")))[0])["generation"] == 1
    assert node.cdi_devices() == sorted([GPU, other])
    node.driver.broken = True
    [observed] = daemon.handle(node.spec(2, gpu_booking(other, "r-2")))
    body = node.opened(observed)
    assert body["generation"] == 1 and body["conditions"][0]["type"] == "SpecFailed"
    assert node.cdi_devices() == [other]  # r-1 released: withdrawn although nothing else could be applied
    node.driver.broken = False
    daemon.repair_drift()  # the drift check follows the newest spec, never back to the one applied before
    assert node.cdi_devices() == [other]
    node.driver.broken = True
    [observed] = daemon.handle(node.spec(3))
    assert node.opened(observed)["generation"] == 1 and not node.cdi_path.exists()


def test_the_cdi_file_carries_the_driver_files_every_device_needs(node: Node) -> None:
    version = node.driver.collect()["driver"]["version"]
    root = node.tmp / "driver-root"
    libraries = "usr/lib/x86_64-linux-gnu"
    for path in (f"{libraries}/libcuda.so.{version}", f"{libraries}/libnvidia-ml.so.{version}", "usr/bin/nvidia-smi"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"")
    hook_binary(root, "/usr/bin/nvidia-cdi-hook", "create-symlinks", "enable-cuda-compat", "update-ldcache")
    node.driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME, root=str(root))
    node.daemon().handle(node.spec(1, gpu_booking()))
    document = check(yaml.safe_load(node.cdi_path.read_text()))
    common = document["containerEdits"]
    assert [mount["containerPath"] for mount in common["mounts"]] == [
        f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}", f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}",
        "/usr/bin/nvidia-smi"]
    assert [hook["args"][1] for hook in common["hooks"]] == ["create-symlinks", "enable-cuda-compat", "update-ldcache"]
    assert common["deviceNodes"] and [device["name"] for device in document["devices"]] == [GPU]


def test_bcd_warns_at_start_of_other_specs_declaring_its_devices(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    etc, run = node.cdi_path.parent, node.tmp / "var-run-cdi"
    run.mkdir()
    (run / "nvidia.yaml").write_text(yaml.safe_dump({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": GPU, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}))
    etc.mkdir()
    with caplog.at_level(logging.WARNING):
        assert node.daemon().warn_other_specs((etc, run)) == [
            f"{run / 'nvidia.yaml'} also declares nvidia.com/gpu={GPU}: {run} overrides the entries of "
            "lower-priority directories, so the runtime silently uses its device, not ours"]
    assert f"{run / 'nvidia.yaml'} also declares nvidia.com/gpu={GPU}" in caplog.text


# -- commands ---------------------------------------------------------------------------------------------

def results(node: Node, messages: list[Message]) -> list[dict[str, Any]]:
    return [node.opened(message) for message in messages if isinstance(message, Result)]


def test_a_command_delivered_twice_runs_once_also_across_a_restart(node: Node) -> None:
    reboot = node.command("reboot")
    first = results(node, node.daemon().handle(reboot))
    second = results(node, node.daemon().handle(reboot))  # a restarted daemon: the journal on disk answers
    assert node.driver.reboots == 1
    assert [result["status"] for result in first + second] == ["succeeded", "succeeded"]
    assert first[0]["command_id"] == second[0]["command_id"] == reboot.envelope["body"]["command_id"]


def test_drain_processes_reports_the_gpu_processes(node: Node) -> None:
    [result] = results(node, node.daemon().handle(node.command("drain_processes")))
    assert result["status"] == "succeeded" and json.loads(result["output"]) == PROCESSES


def test_collect_inventory_sends_a_fresh_signed_inventory_before_the_result(node: Node) -> None:
    inventory, result = node.daemon().handle(node.command("collect_inventory"))
    assert node.opened(inventory) == {"inventory": node.driver.collect()}
    assert node.opened(result)["status"] == "succeeded"


def report_numbers(message: Message) -> tuple[int, int]:
    assert isinstance(message, (Observed, Result, Inventory)), message
    return message.envelope["body"]["epoch"], message.envelope["body"]["seq"]


def test_reports_carry_the_session_epoch_and_count_within_it(node: Node) -> None:
    daemon = node.daemon()
    daemon.session_opened(7)
    first = [daemon.inventory(), *daemon.handle(node.command("collect_inventory"))]
    assert [report_numbers(message) for message in first] == [(7, 1), (7, 2), (7, 3)]
    daemon.session_opened(8)  # a new session (the worker applies (epoch, seq) in increasing order only)
    assert report_numbers(daemon.handle(node.spec(1, gpu_booking()))[0]) == (8, 1)


def test_an_unknown_kind_is_unsupported_and_journalled(node: Node) -> None:
    command = node.command("format_disks")
    [result] = results(node, node.daemon().handle(command))
    assert result["status"] == "unsupported" and "format_disks" in result["output"]
    assert Journal(node.state.directory).status(command.envelope["body"]["command_id"]) == "unsupported"


def test_a_command_that_fails_is_reported_failed(node: Node) -> None:
    node.driver.broken = True
    [result] = results(node, node.daemon().handle(node.command("collect_inventory")))
    assert result["status"] == "failed" and "nvidia-smi" in result["output"]


def test_a_command_that_does_not_verify_is_not_executed(node: Node) -> None:
    reboot = node.command("reboot")
    forged = Command(sign_envelope("command", reboot.envelope["body"], Ed25519PrivateKey.generate()))
    [answer] = node.daemon().handle(forged)
    assert isinstance(answer, Error) and node.driver.reboots == 0
    assert not Journal(node.state.directory).seen(reboot.envelope["body"]["command_id"])


# -- the certificate --------------------------------------------------------------------------------------

def test_renewal_asks_for_the_same_key_and_keeps_the_new_certificate(node: Node) -> None:
    later = NOW + timedelta(minutes=45)
    daemon = node.daemon(later)
    assert daemon.renew_at() <= later
    csr = read_csr(daemon.renewal().csr)
    assert csr.public_key == node.state.load().key.public_key() and csr.hostname == HOSTNAME
    renewed = issue_svid(node.ca, daemon.renewal().csr, node.node_id, later)
    assert daemon.handle(Certificate(renewed)) == []
    assert (node.state.directory / CERT_FILE).read_text() == renewed
    assert daemon.renew_at() > later and node.state.load().certificate == daemon.credentials.certificate


def test_a_renewed_certificate_for_another_key_is_refused(node: Node) -> None:
    daemon = node.daemon()
    before = (node.state.directory / CERT_FILE).read_bytes()
    stranger = issue_svid(node.ca, make_csr(generate_node_key(), HOSTNAME), node.node_id, NOW)
    [answer] = daemon.handle(Certificate(stranger))
    assert isinstance(answer, Error)
    assert (node.state.directory / CERT_FILE).read_bytes() == before


# -- the session's pieces ---------------------------------------------------------------------------------

def test_backoff_is_exponential_with_full_jitter_up_to_a_cap() -> None:
    draws: list[tuple[float, float]] = []
    backoff = Backoff(base=0.5, cap=30.0, draw=lambda low, high: draws.append((low, high)) or high)
    assert [backoff.next() for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert all(low == 0 for low, _ in draws)
    backoff.reset()
    assert backoff.next() == 0.5


def test_run_dials_the_gateways_in_turn(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """`bcd run --gateway A --gateway B`: each try after a failed one goes to the next gateway (two
    ports on this machine where nothing listens: each dial is refused at once)."""
    gateways = ["wss://127.0.0.1:1", "wss://127.0.0.1:2"]

    def dialled() -> list[str]:
        return [record.args[0] for record in caplog.records if record.msg.startswith("cannot hold a session with")]

    async def three_tries() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(run(node.daemon(), gateways, stop, Backoff(base=0.01, cap=0.01)))
        async with asyncio.timeout(SECONDS):
            while len(dialled()) < 3:
                await asyncio.sleep(0.01)
        stop.set()
        await running

    caplog.set_level(logging.WARNING, logger="better_compute.daemon.runtime")
    asyncio.run(three_tries())
    assert dialled()[:3] == [endpoint(gateways[0], SESSION_PATH), endpoint(gateways[1], SESSION_PATH),
                             endpoint(gateways[0], SESSION_PATH)]


def test_the_session_asks_for_a_new_certificate_once_due(node: Node) -> None:
    class Connection:
        def __init__(self) -> None:
            self.sent: list[Message] = []

        async def send(self, frame: str) -> None:
            self.sent.append(decode(frame))

    async def sent_within(daemon: Daemon, seconds: float) -> list[Message]:
        connection = Connection()
        task = asyncio.create_task(renew(daemon, connection))  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        task.cancel()
        return connection.sent

    assert asyncio.run(sent_within(node.daemon(NOW), 0.2)) == []
    [renewal] = asyncio.run(sent_within(node.daemon(NOW + timedelta(minutes=45)), 0.2))
    assert isinstance(renewal, Renew) and read_csr(renewal.csr).public_key == node.state.load().key.public_key()


def test_bcd_says_what_is_wrong_and_exits_non_zero(node: Node, tmp_path: Path) -> None:
    runner = CliRunner()
    fresh = str(tmp_path / "fresh")
    not_joined = runner.invoke(app, ["run", "--gateway", "wss://127.0.0.1:1", "--state-dir", fresh,
                                     *fake_driver(HOSTNAME)])
    assert not_joined.exit_code == 1 and "bcd join" in not_joined.output
    assert not Path(fresh).exists()  # nothing made where no node joined
    ca_file = str(node.tmp / "ca" / "ca.crt")
    unreachable = runner.invoke(app, ["join", "--gateway", "wss://127.0.0.1:1", "--token", "t", "--ca-file", ca_file,
                                      "--state-dir", fresh, *fake_driver(HOSTNAME)])
    assert unreachable.exit_code == 1 and "cannot reach the gateway" in unreachable.output
    twice = runner.invoke(app, ["join", "--gateway", "wss://127.0.0.1:1", "--token", "t", "--ca-file", ca_file,
                                "--state-dir", str(node.state.directory), *fake_driver(HOSTNAME)])
    assert twice.exit_code == 1 and f"holds node {node.node_id} already" in twice.output


def test_nodes_dial_only_tls() -> None:
    assert endpoint("wss://gw.example.com:8443/", "/session") == "wss://gw.example.com:8443/session"
    with pytest.raises(ValueError, match="wss://"):
        endpoint("ws://gw.example.com", "/session")


# -- end to end: bcd processes, the real gateway and worker ------------------------------------------------

TENANT = "00000000-0000-0000-0000-0000000bcd01"
ALLOW = {"allowed": True, "reason": "test", "matched": [], "principal": "user:alice"}


@pytest.fixture
def control_plane(db_dsn: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    """The gateway, and the worker that signs specs and commands."""
    with running_gateway(db_dsn, tmp_path / "keys") as gateway, running_worker_process(db_dsn, gateway.keys):
        yield gateway


@pytest.fixture
def pool_id(sql: psycopg.Connection) -> uuid.UUID:
    """An empty H200 pool of TENANT that offers whole GPUs: nodes join it."""
    return make_pool(sql, [], shapes=("gpu",), tenant_id=TENANT)


def api(sql: psycopg.Connection, method: str, document: dict[str, Any]) -> Any:
    """One API call as the relay makes it (api.prepare, an allow, api.admit); its data."""
    prepared = sql.execute("SELECT api.prepare(%s, %s, %s)", (method, TENANT, Jsonb(document))).fetchone()[0]
    answer = sql.execute("SELECT api.admit(%s, %s)", (prepared["admission_id"], Jsonb(ALLOW))).fetchone()[0]
    assert "data" in answer, answer
    return answer["data"]


def bcd_join(gateway: GatewayProcess, db_dsn: str, pool_id: uuid.UUID, tmp_path: Path) -> JoinedNode:
    [token] = mint_tokens(db_dsn, pool_id, 1)
    node = join_node(gateway, token, tmp_path, f"bcd-{uuid.uuid4().hex[:8]}")
    again = bcd("join", "--gateway", gateway.url, "--token", token, "--ca-file", str(gateway.ca_path),
                "--state-dir", str(tmp_path / "again"), *fake_driver(node.hostname))
    assert again.returncode == 1 and "ACCESS_DENIED" in again.stderr  # the token was used
    return node


def test_a_booking_reaches_the_cdi_file_and_leaves_it_on_release(control_plane: GatewayProcess, db_dsn: str,
                                                                 sql: psycopg.Connection, pool_id: uuid.UUID,
                                                                 tmp_path: Path) -> None:
    node = bcd_join(control_plane, db_dsn, pool_id, tmp_path)
    gpu = fake.gpu_uuid(node.hostname, 0)
    assert sql.execute("SELECT name, pool_id FROM compute.nodes WHERE node_id = %s",
                       (node.node_id,)).fetchone() == (node.hostname, pool_id)
    assert sql.execute("SELECT d.uuid, a.kind FROM compute.atoms AS a JOIN compute.devices AS d USING (device_id) "
                       "WHERE a.node_id = %s", (node.node_id,)).fetchall() == [(gpu, "gpu")]

    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path) as daemon:
        wait_until(lambda: converged(sql, node, []), "the first (empty) spec observed", daemon.log)
        end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
        reservation = api(sql, "reservations.create", {"pool_id": str(pool_id), "shape": "gpu", "count": 1,
                                                       "end": end.isoformat()})
        booked = time.monotonic()
        wait_until(lambda: converged(sql, node, [gpu]), "the booked GPU in the CDI file", daemon.log)
        assert time.monotonic() - booked < SECONDS
        annotations = yaml.safe_load(node.cdi_path.read_text())["devices"][0]["annotations"]
        assert annotations["better-compute/reservations"] == reservation["reservation_id"]
        signed, _ = spec_state(sql, node.node_id)
        assert yaml.safe_load(node.cdi_path.read_text())["annotations"]["better-compute/generation"] == str(signed)

        api(sql, "reservations.release", {"reservation_id": reservation["reservation_id"]})
        wait_until(lambda: converged(sql, node, []) and spec_state(sql, node.node_id)[0] > signed,
                   "the released GPU gone from the CDI file", daemon.log)
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(STOP_SECONDS) == 0
    wait_until(lambda: sql.execute("SELECT compute.node_connection(%s)", (node.node_id,)).fetchone()[0]["connected"]
               is False, "the session closed by SIGTERM")


def test_a_command_delivered_twice_executes_once(control_plane: GatewayProcess, db_dsn: str, sql: psycopg.Connection,
                                                 pool_id: uuid.UUID, tmp_path: Path) -> None:
    """The fake driver's reboot changes its boot id; two reboots would show the second boot id in the
    inventory that collect_inventory sends afterwards."""
    node = bcd_join(control_plane, db_dsn, pool_id, tmp_path)

    def finished(command_id: str) -> str | None:
        return sql.execute("SELECT state FROM compute.node_commands WHERE command_id = %s AND state <> 'pending'",
                           (command_id,)).fetchone()

    def enqueue(kind: str) -> str:
        return str(sql.execute("SELECT (compute.command_enqueue(%s, %s, '{}', %s)).command_id",
                               (node.node_id, kind, str(uuid.uuid4()))).fetchone()[0])

    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path) as daemon:
        reboot = enqueue("reboot")
        assert wait_until(lambda: finished(reboot), "the reboot's result", daemon.log) == ("succeeded",)
        # The result is lost on the way (as far as the control plane knows): delivered again.
        sql.execute("UPDATE compute.node_commands SET state = 'pending', finished_at = NULL, delivered_at = NULL "
                    "WHERE command_id = %s", (reboot,))
        sql.execute("SELECT pg_notify('bc_node_command', %s)", (str(node.node_id),))
        assert wait_until(lambda: finished(reboot), "the repeated reboot's result", daemon.log) == ("succeeded",)
        assert "answered from the journal" in daemon.log()
        unknown = enqueue("format_disks")
        assert wait_until(lambda: finished(unknown), "the unknown kind's result", daemon.log) == ("unsupported",)
        collect = enqueue("collect_inventory")
        assert wait_until(lambda: finished(collect), "collect_inventory's result", daemon.log) == ("succeeded",)
    boot_id = sql.execute("SELECT inventory ->> 'boot_id' FROM compute.nodes WHERE node_id = %s",
                          (node.node_id,)).fetchone()[0]
    assert boot_id == str(fake.derived_uuid(node.hostname, "boot", 1))  # rebooted once


def test_a_killed_daemon_changes_nothing_even_hours_later(control_plane: GatewayProcess, db_dsn: str, sql: psycopg.Connection,
                                         pool_id: uuid.UUID, tmp_path: Path) -> None:
    node = bcd_join(control_plane, db_dsn, pool_id, tmp_path)
    end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
    api(sql, "reservations.create", {"pool_id": str(pool_id), "shape": "gpu", "count": 1, "end": end.isoformat()})

    def world() -> list[Any]:
        return [sql.execute(query, (node.node_id,)).fetchall() for query in (
            "SELECT b.atom_id, b.reservation_id, compute.booking_state(b.state, r.state), b.during FROM compute.bookings AS b "
            "JOIN compute.reservations AS r USING (reservation_id) WHERE b.node_id = %s ORDER BY b.atom_id",
            "SELECT generation, spec, signed_generation, observed_generation FROM compute.node_specs "
            "WHERE node_id = %s",
            "SELECT flag FROM compute.node_flags WHERE node_id = %s ORDER BY flag",
            "SELECT device_id, present FROM compute.devices WHERE node_id = %s ORDER BY device_id")]

    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path) as daemon:
        wait_until(lambda: converged(sql, node, [fake.gpu_uuid(node.hostname, 0)]), "the booking applied", daemon.log)
        before, cdi = world(), node.cdi_path.read_bytes()
        daemon.process.kill()
        daemon.process.wait()
        wait_until(lambda: sql.execute("SELECT compute.node_connection(%s)", (node.node_id,)).fetchone()[0]["connected"]
                   is False, "Connected=False")
    assert world() == before and node.cdi_path.read_bytes() == cdi
    assert before[0][0][2] == "active"
    # Hours later (this session's clock only: the processes keep theirs) it is still only an age.
    sql.execute("SELECT compute.clock_pin(compute.compute_now() + interval '6 hours')")
    connection = sql.execute("SELECT compute.node_connection(%s)", (node.node_id,)).fetchone()[0]
    assert connection["connected"] is False and connection["last_heard_seconds"] >= 6 * 3600
    assert world() == before


def test_a_fenced_daemon_does_not_fight_and_comes_back(control_plane: GatewayProcess, db_dsn: str,
                                                       sql: psycopg.Connection, pool_id: uuid.UUID,
                                                       tmp_path: Path) -> None:
    """A second session with the node's SVID fences the daemon's (4001); the daemon reconnects after
    its backoff, with a new session that fences the intruder in turn, and stays connected."""
    node = bcd_join(control_plane, db_dsn, pool_id, tmp_path)

    def session() -> dict[str, Any]:
        return sql.execute("SELECT compute.node_connection(%s)", (node.node_id,)).fetchone()[0]

    async def intrude() -> tuple[int, int | None]:
        async with connect(control_plane.url + SESSION_PATH, ssl=NodeState(node.state_dir).session_tls()) as intruder:
            hello = decode(await intruder.recv())
            assert isinstance(hello, Hello)
            async with asyncio.timeout(SECONDS):
                await intruder.wait_closed()
            return hello.epoch, intruder.close_code

    with running_bcd(control_plane, node.state_dir, node.hostname, node.cdi_path) as daemon:
        wait_until(lambda: session()["connected"], "the daemon's session", daemon.log)
        epoch, close_code = asyncio.run(intrude())
        assert close_code == FENCED
        wait_until(lambda: session()["session_epoch"] > epoch and session()["connected"], "the daemon back", daemon.log)
        assert "fenced: a newer session" in daemon.log()


def run_sim(gateway: GatewayProcess, db_dsn: str, pool_id: uuid.UUID, root: Path, count: int,
            until: Callable[[list[str]], bool]) -> list[str]:
    """`sim nodes` until `until(lines printed)`, then SIGINT; what it printed (it must exit 0)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "better_compute.cli.main", "sim", "nodes", "--count", str(count),
         "--gateway", gateway.url, "--ca-file", str(gateway.ca_path), "--dsn", db_dsn, "--pool", str(pool_id),
         "--state-root", str(root), "--inventory", str(H200_INVENTORY), "--status-seconds", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "py")})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: until(lines), f"{count} simulated nodes", lambda: "".join(lines))
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(STOP_SECONDS)
        reader.join(STOP_SECONDS)
    assert process.returncode == 0, "".join(lines)
    return lines


def test_the_simulator_runs_many_nodes_in_one_process(control_plane: GatewayProcess, db_dsn: str,
                                                      sql: psycopg.Connection, pool_id: uuid.UUID,
                                                      tmp_path: Path) -> None:
    def nodes() -> list[tuple[str, str]]:
        return sql.execute("SELECT n.name, d.uuid FROM compute.nodes AS n JOIN compute.devices AS d USING (node_id) "
                           "WHERE n.pool_id = %s ORDER BY n.name", (pool_id,)).fetchall()

    def all_converged(count: int) -> Callable[[list[str]], bool]:
        def check(lines: list[str]) -> bool:
            observed = sql.execute("SELECT count(*) FROM compute.node_specs AS s JOIN compute.nodes AS n "
                                   "USING (node_id) WHERE n.pool_id = %s "
                                   "AND s.observed_generation = s.signed_generation", (pool_id,)).fetchone()[0]
            status = f"sim: {count}/{count} joined, {count} connected, {count} specs applied, 0 failed"
            return observed == count and any(line.startswith(status) for line in lines)
        return check

    def expected(count: int) -> list[tuple[str, str]]:
        return [(f"sim-{number:04d}", fake.gpu_uuid(f"sim-{number:04d}", 0)) for number in range(1, count + 1)]

    first = run_sim(control_plane, db_dsn, pool_id, tmp_path / "sim", 3, all_converged(3))
    assert "3 to join" in first[0] and nodes() == expected(3)
    assert first[-1].startswith("sim: 3/3 joined, 0 connected")  # the last word, after SIGINT
    # Again with the same state root and one node more: the three reconnect, only the fourth joins.
    second = run_sim(control_plane, db_dsn, pool_id, tmp_path / "sim", 4, all_converged(4))
    assert "1 to join" in second[0] and nodes() == expected(4)


# -- the spec the database makes, applied by the daemon --------------------------------------------------------

def mig_recording(path: Path, layout: list[tuple[str, int, int]]) -> Path:
    """The H200 capture with GPU 0 in MIG mode and these (profile, placement, gi) instances, each with
    the capability device nodes the daemon reads: the fake driver serves it as a MIG node."""
    recorded = json.loads(H200_INVENTORY.read_text())
    recorded["devices"][0]["mig"] |= {"mode": "enabled", "instances": [
        {"profile": profile, "placement": placement, "gi": gi, "ci": 0, "uuid": "MIG-recorded",
         "device_nodes": [f"/dev/nvidia-caps/nvidia-cap{10 * gi + 1}", f"/dev/nvidia-caps/nvidia-cap{10 * gi + 2}"]}
        for profile, placement, gi in layout]}
    path.write_text(json.dumps(recorded))
    return path


def database_spec(sql: psycopg.Connection, node_id: uuid.UUID) -> list[dict[str, Any]]:
    return sql.execute("SELECT compute.node_spec_document(%s) -> 'devices'", (node_id,)).fetchone()[0]


def test_a_re_laid_gpu_exposes_no_older_instance_to_a_new_booking(node: Node, sql: psycopg.Connection) -> None:
    """The database's spec, applied by the daemon: two 3g.71gb instances are exposed by their MIG
    UUIDs. The operator re-lays the GPU to 1g.18gb@0..3 while the old 3g.71gb instance at slices 0-3
    still exists on the node: a booking of 1g.18gb@0 gets no device (not the 3g.71gb instance), and
    the node says so."""
    node.driver = FlakyDriver(mig_recording(node.tmp / "mig.json", [("3g.71gb", 0, 1), ("3g.71gb", 4, 2)]),
                              hostname=HOSTNAME)
    daemon = node.daemon()
    pool = make_pool(sql, [], shapes=("mig:3g.71gb", "mig:1g.18gb"), tenant_id=TENANT)
    node_id = sql.execute("SELECT compute.node_register(%s, %s, %s)",
                          (pool, HOSTNAME, Jsonb(node.driver.collect()))).fetchone()[0]
    end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0].isoformat()
    both = api(sql, "reservations.create", {"pool_id": str(pool), "shape": "mig:3g.71gb", "count": 2, "end": end})
    instances = node.driver.collect()["devices"][0]["mig"]["instances"]
    [observed] = daemon.handle(node.spec(1, *database_spec(sql, node_id)))
    assert node.opened(observed)["conditions"] == []
    assert node.cdi_devices() == sorted(instance["uuid"] for instance in instances)

    api(sql, "reservations.release", {"reservation_id": both["reservation_id"]})
    sql.execute("SELECT compute.device_set_layout(d.device_id, 'mig:1g.18gb@0,1g.18gb@1,1g.18gb@2,1g.18gb@3,3g.71gb@4') "
                "FROM compute.devices AS d WHERE d.node_id = %s", (node_id,))
    small = api(sql, "reservations.create", {"pool_id": str(pool), "shape": "mig:1g.18gb", "count": 1, "end": end})
    [booking] = small["bookings"]
    assert (booking["placement"], booking["cdi_name"]) == (0, None)
    [observed] = daemon.handle(node.spec(2, *database_spec(sql, node_id)))
    [condition] = node.opened(observed)["conditions"]
    assert condition["type"] == "DevicesUnresolved" and condition["devices"] == [f"mig 1g.18gb@0 of {GPU}"]
    assert not node.cdi_path.exists()


def mig_spec(node: Node, generation: int, layout: list[tuple[str, int]], *devices: dict[str, Any],
             instances: list[dict[str, Any]] | None = None) -> Spec:
    """A spec whose `gpus` entry asks GPU 0 for the MIG instances `layout` (sql's node_spec_document),
    and the VPS `instances` given."""
    gpus = [{"uuid": GPU, "index": 0, "layout": "mig", "mig": {
        "mode": "enabled", "instances": [{"profile": profile, "placement": at} for profile, at in layout]}}]
    body = {"node_id": str(node.node_id), "generation": generation,
            "spec": {"node_id": str(node.node_id), "devices": list(devices), "gpus": gpus,
                     **({} if instances is None else {"instances": instances})}}
    return Spec(node.intent.sign("spec", body))


@pytest.fixture
def idle_node(node: Node) -> Node:
    """The node, with no process on its GPU (one would hold a MIG mode change pending a reset)."""
    node.driver = FlakyDriver(H200_INVENTORY, hostname=HOSTNAME)
    return node


def test_a_spec_with_a_mig_layout_changes_the_gpu_reports_its_inventory_then_acknowledges(idle_node: Node) -> None:
    node = idle_node
    daemon = node.daemon()
    inventory, observed = daemon.handle(mig_spec(node, 3, [("3g.71gb", 0), ("3g.71gb", 4)]))
    instances = node.opened(inventory)["inventory"]["devices"][0]["mig"]["instances"]
    assert [(i["profile"], i["placement"]) for i in instances] == [("3g.71gb", 0), ("3g.71gb", 4)]
    assert node.opened(observed) == {"generation": 3, "conditions": [], "devices": [],
                                     "withdrawal": {"stopped": [], "in_use": []}}, "converged: nothing abnormal to say"
    assert daemon.handle(mig_spec(node, 3, [("3g.71gb", 0), ("3g.71gb", 4)]))[0].TYPE == "observed", "no change, no inventory"


def test_a_mig_failure_and_an_injected_xid_are_reported_per_gpu(idle_node: Node) -> None:
    node = idle_node
    daemon = node.daemon()
    node.driver.inject(GPU, insufficient_resources=True, xid=[79])
    inventory, observed = daemon.handle(mig_spec(node, 3, [("3g.71gb", 4)]))  # MIG mode was enabled: a change
    reported = {(c["gpu_uuid"], c["type"], c["status"], c["reason"]) for c in node.opened(observed)["conditions"]}
    assert reported == {(GPU, "MigConverged", False, "InsufficientResources"), (GPU, "MigFailed", True, "InsufficientResources"),
                        (GPU, "FallenOffBus", True, "Xid79")}
    node.driver.inject(GPU, insufficient_resources=None, xid=None)
    inventory, again = daemon.reconcile()
    assert [(i["profile"], i["placement"]) for i in node.opened(inventory)["inventory"]["devices"][0]["mig"]["instances"]] \
        == [("3g.71gb", 4)]
    assert node.opened(again)["conditions"] == [], "the next pass converges and says so"
    assert daemon.reconcile() == [], "nothing changed since: nothing sent"


def test_a_gpu_an_instance_holds_is_left_out_of_the_mig_pass(idle_node: Node) -> None:
    """A GPU passed through to a VM is the VM's: even a spec that (wrongly) also asks it for a MIG
    layout leaves it as it is (no GPU change, hence no inventory), and no CDI device names it."""
    node = idle_node
    daemon = node.daemon()
    [observed] = daemon.handle(mig_spec(node, 3, [("3g.71gb", 0), ("3g.71gb", 4)], instances=[
        {"instance_id": "5f0c8f3e-8a31-4f55-9a0e-7c4b1d2e3f40", "gpus": [{"device_uuid": GPU}]}]))
    assert observed.TYPE == "observed", "the GPU was not changed: no inventory"
    assert node.opened(observed)["conditions"] == []
    assert not node.cdi_path.exists()
