"""Bare metal end to end with real processes: PostgreSQL, the gateway and the worker (`serve`), the
site agent (`serve site-agent`, dialing the gateway with its own certificate; the 503 / BMC-down
cases use its fallback login, bc_site_agent), a real Redfish BMC (sushy-tools' emulator, fake
driver) and `bcd`.

enroll -> manage (verify over Redfish) -> provide (power off, media out, image in with a token,
boot from CD, power on) -> the image's bcd joins with the machine's token -> active, bookable -> a
tenant's reservation of shape bare_metal books all of it (reservations.create) -> its release
(reservations.release) -> cleaning (old key revoked) -> available -> deployed again -> rejoin with
a new key.
Then: persistent 503s quarantine with the reason; a BMC that is down changes only BmcReachable;
an 11 s power change succeeds; and no credential byte is in any table or log of the run."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from bare_metal_support import (Agent, Emulator, boot_image, dsn_link, enroll, gateway_link, image_server, public_key_b64,
                                register_agent, running_agent, running_emulator, start_emulator, state, wait_state)
from better_compute.siteagent.redfish import Bmc, Credentials
from fleet import H200_MODEL
from gateway_support import GatewayProcess, running_worker_process
from node_support import running_bcd, wait_until

PROVISION_SECONDS = 120.0  # two power changes of up to 11 s each, and the rest


TENANT = uuid.UUID("00000000-0000-0000-0000-0000000000b1")


@pytest.fixture
def site(sql: psycopg.Connection) -> tuple[uuid.UUID, uuid.UUID]:
    """A tenant's site and pool of H200s, offering GPUs and whole machines (bare_metal)."""
    site_id = sql.execute("SELECT compute.site_create('rack-1', %s)", (TENANT,)).fetchone()[0]
    pool_id = sql.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site_id, H200_MODEL)).fetchone()[0]
    sql.execute("SELECT compute.offering_create(%s, 'gpu', 8, interval '1 day')", (pool_id,))
    sql.execute("SELECT compute.offering_create(%s, 'bare_metal', 1, interval '1 day', 'bare_metal')", (pool_id,))
    return site_id, pool_id


def api_mutation(sql: psycopg.Connection, method: str, document: dict[str, Any]) -> Any:
    """A mutation through the admission as the relay makes it (prepare, IAM's allow, admit)."""
    prepared = sql.execute("SELECT api.prepare(%s, %s, %s)", (method, TENANT, Jsonb(document))).fetchone()[0]
    admitted = sql.execute("SELECT api.admit(%s, %s)", (prepared["admission_id"],
                                                        Jsonb({"allowed": True, "principal": "user:alice"}))).fetchone()[0]
    assert "data" in admitted, admitted
    return admitted["data"]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with running_emulator(tmp_path / "bmc") as running:
        yield running


@pytest.fixture
def image(tmp_path: Path) -> Iterator[str]:
    with image_server(tmp_path / "images") as url:
        yield url


@pytest.fixture
def agent(sql: psycopg.Connection, site: tuple[uuid.UUID, uuid.UUID], tmp_path: Path) -> Iterator[Agent]:
    registered = register_agent(sql, site[0], tmp_path / "site-agent.key")
    yield registered
    registered.log_path.unlink(missing_ok=True)


@pytest.fixture
def worker(db_dsn: str, tmp_path: Path) -> Iterator[None]:
    """`serve worker`: the reconciler of machines (and the sweep)."""
    with running_worker_process(db_dsn, tmp_path / "keys"):
        yield


def test_enroll_provision_join_release_clean_rejoin_with_a_new_key(
        sql: psycopg.Connection, db_dsn: str, site: tuple[uuid.UUID, uuid.UUID], emulator: Emulator, image: str,
        agent: Agent, gateway: GatewayProcess, tmp_path: Path) -> None:
    machine = enroll(sql, agent, site[1], "bm-01", emulator, image)
    with running_agent(gateway_link(gateway), agent, tmp_path / "keys" / "intent.key"):
        sql.execute("SELECT ops.machine_manage('bm-01')")
        wait_state(sql, machine, "manageable", PROVISION_SECONDS, agent)
        sql.execute("SELECT ops.machine_provide('bm-01')")
        wait_state(sql, machine, "deploy_wait", PROVISION_SECONDS, agent)

        first = boot_image(gateway, emulator, tmp_path / "boot-1", "bm-01")
        assert first.returncode == 0, first.stderr
        wait_state(sql, machine, "active", 10)
        node_id = sql.execute("SELECT node_id FROM compute.machines WHERE machine_id = %s", (machine,)).fetchone()[0]
        old_key = public_key_b64(sql, node_id)
        assert sql.execute("SELECT count(*) FROM compute.atoms WHERE node_id = %s", (node_id,)).fetchone()[0] == 1

        # A tenant books the whole machine; its release cleans it (the worker's reconciler).
        end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
        held = api_mutation(sql, "reservations.create", {"pool_id": str(site[1]), "shape": "bare_metal", "count": 1,
                                                         "end": end.isoformat()})
        atoms = sql.execute("SELECT atom_id::text FROM compute.atoms WHERE node_id = %s", (node_id,)).fetchall()
        assert held["state"] == "active" and sorted(b["atom_id"] for b in held["bookings"]) == sorted(a for (a,) in atoms)
        assert state(sql, machine) == "active"
        api_mutation(sql, "reservations.release", {"reservation_id": held["reservation_id"]})
        wait_until(lambda: public_key_b64(sql, node_id) is None, "the old identity revoked", agent.log, timeout=30)
        wait_state(sql, machine, "deploy_wait", PROVISION_SECONDS, agent)  # cleaned, available, deployed again
        again = boot_image(gateway, emulator, tmp_path / "boot-2", "bm-01")
        assert again.returncode == 0, again.stderr
        wait_state(sql, machine, "active", 10)
        new_key = public_key_b64(sql, node_id)
        assert new_key not in (None, old_key)  # the same node, a new key

        # The old identity (the first boot's state: key and an SVID still valid) gets no session:
        # its key is not the node's registered one; the node keeps its new key and its session.
        epochs = "SELECT coalesce(max(epoch), 0) FROM compute.node_sessions WHERE node_id = %s"
        epoch = sql.execute(epochs, (node_id,)).fetchone()[0]
        with running_bcd(gateway, tmp_path / "boot-1" / "state", "bm-01", tmp_path / "old-cdi.yaml") as old:
            wait_until(lambda: "is not the registered key of node" in old.log(), "the old identity refused", old.log,
                       timeout=30)
            assert "session open" not in old.log()
        assert sql.execute(epochs, (node_id,)).fetchone()[0] == epoch
        assert public_key_b64(sql, node_id) == new_key

    ops = sql.execute("SELECT kind, state FROM compute.bmc_ops WHERE machine_id = %s ORDER BY op_id", (machine,)).fetchall()
    assert {state for _kind, state in ops} == {"succeeded"}
    assert [kind for kind, _state in ops] == ["verify", "power_off", "vmedia_eject", "vmedia_insert", "boot_device", "power_on",
                                             "power_off", "vmedia_eject", "boot_device",
                                             "power_off", "vmedia_eject", "vmedia_insert", "boot_device", "power_on"]
    # The agent ran every op over its gateway session (its own certificate), not as bc_site_agent.
    assert sql.execute("SELECT gateway FROM ops.site_agent_sessions WHERE agent_id = %s",
                       (agent.agent_id,)).fetchone() == ("gw-test",)
    assert_no_credential_anywhere(sql, db_dsn, emulator.password, [agent.log(), gateway.server.log()])


def assert_no_credential_anywhere(sql: psycopg.Connection, dsn: str, password: str, logs: list[str]) -> None:
    dump = subprocess.run(["pg_dump", "--data-only", "--dbname", dsn], capture_output=True, text=True, check=True).stdout
    assert "compute.machine_credentials" in dump or "machine_credentials" in dump
    assert password not in dump
    for log in logs:
        assert password not in log


def test_persistent_503s_quarantine_the_machine_with_the_reason(
        sql: psycopg.Connection, db_dsn: str, site: tuple[uuid.UUID, uuid.UUID], emulator: Emulator, image: str,
        agent: Agent, worker: None, tmp_path: Path) -> None:
    machine = enroll(sql, agent, site[1], "bm-02", emulator, image)
    emulator.fault(status=503)
    with running_agent(dsn_link(db_dsn), agent, tmp_path / "keys" / "intent.key"):
        sql.execute("SELECT ops.machine_manage('bm-02')")
        wait_state(sql, machine, "verify_failed", 60, agent)
    row = sql.execute("SELECT quarantined, failure_count, last_error, bmc_reachable FROM ops.machines WHERE machine_id = %s",
                      (machine,)).fetchone()
    assert row[0] is True and row[1] == 5 and row[3] is True
    assert row[2] == "verify failed 5 times; last: the BMC answered HTTP 503"
    emulator.fault(status=None)
    sql.execute("SELECT ops.machine_retry('bm-02')")  # only an operator leaves a failed state
    with running_agent(dsn_link(db_dsn), agent, tmp_path / "keys" / "intent.key"):
        wait_state(sql, machine, "manageable", 60, agent)


def test_a_bmc_that_is_down_changes_only_bmc_reachable(
        sql: psycopg.Connection, db_dsn: str, site: tuple[uuid.UUID, uuid.UUID], emulator: Emulator, image: str,
        agent: Agent, worker: None, tmp_path: Path) -> None:
    machine = enroll(sql, agent, site[1], "bm-03", emulator, image)
    emulator.stop()
    with running_agent(dsn_link(db_dsn), agent, tmp_path / "keys" / "intent.key"):
        sql.execute("SELECT ops.machine_manage('bm-03')")
        wait_until(lambda: sql.execute("SELECT bmc_reachable IS FALSE FROM compute.machines WHERE machine_id = %s",
                                       (machine,)).fetchone()[0], "BmcReachable false", agent.log)
        row = sql.execute("SELECT state, bmc_reachable, failure_count, last_error FROM compute.machines WHERE machine_id = %s",
                          (machine,)).fetchone()
        assert row == ("verifying", False, 0, None)
        # Back (its state survives the restart): the machine goes on where it was.
        back = start_emulator(emulator.state_dir, emulator.system_uuid, emulator.password, emulator.port)
        try:
            wait_state(sql, machine, "manageable", 90, agent)  # tried again after bmc_unreachable_retry_seconds
        finally:
            back.stop()


def test_an_11_second_power_change_succeeds(emulator: Emulator) -> None:
    emulator.fault(power_seconds=11)
    bmc = Bmc(emulator.url, Credentials("admin", emulator.password))
    result = bmc.run("power_off", {}, 300)
    assert result["power_state"] == "Off" and result["polls"] >= 10
