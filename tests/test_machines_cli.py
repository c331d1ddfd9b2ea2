"""`better-compute machines` as a subprocess, through the real relay (static IAM): register an agent,
enroll a machine (the password read from a file and sealed in the CLI: it is in no argument, no
output, no table and no audit row), move it, list and show it; an illegal move is refused with the
contract error. Each command is one API call with its IAM decision, none a database login."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from better_compute.pki import IntentSigner
from better_compute.sealing import SecretKeyring, key_id_of
from better_compute.siteagent.cli import raw_public_key
from fleet import H200_MODEL
from gateway_support import REPO
from iam_server import statement, write_static_iam
from relay_support import Relay, running_relay, static_iam

PASSWORD = "correct horse battery staple 14"
TOKEN, TENANT = "token-of-the-operator", "cccccccc-0000-4000-8000-000000000003"


@pytest.fixture
def relay(db_dsn: str, tmp_path: Path) -> Iterator[Relay]:
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow", ["compute:*"])])])
    with running_relay(db_dsn, static_iam(iam)) as running:
        yield running


def cli(relay: Relay, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "py"), "BETTER_COMPUTE_URL": relay.url, "BETTER_COMPUTE_TOKEN": TOKEN,
           "BETTER_COMPUTE_TENANT": TENANT}
    return subprocess.run([sys.executable, "-m", "better_compute.cli.main", "machines", *arguments, "--format", "json"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


def data(done: subprocess.CompletedProcess[str]) -> object:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_operator_enrolls_moves_lists_and_shows_a_machine_through_the_api(db: psycopg.Connection, db_dsn: str, relay: Relay,
                                                                          tmp_path: Path) -> None:
    site = db.execute("SELECT compute.site_create('rack-cli', %s)", (TENANT,)).fetchone()[0]
    pool = db.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site, H200_MODEL)).fetchone()[0]
    db.commit()
    keyring = SecretKeyring(tmp_path / "agent.key")
    signing_key = base64.b64encode(raw_public_key(IntentSigner(tmp_path / "signing.key"))).decode()
    agent = data(cli(relay, "register-agent", "--site-id", str(site), "--name", "agent-1",
                     "--public-key", base64.b64encode(keyring.public_key).decode(), "--signing-key", signing_key))
    assert isinstance(agent, dict) and agent["key_id"] == key_id_of(keyring.public_key)
    assert agent["signing_key"] == signing_key
    (tmp_path / "password").write_text(PASSWORD + "\n")
    enrolled = cli(relay, "enroll", "--agent-id", agent["agent_id"], "--pool-id", str(pool), "--name", "bm-01",
                   "--bmc-address", "https://10.0.0.7", "--system-uuid", "4c4c4544-0042-3010-8052-b4c04f4b4e32",
                   "--image-url", "http://images.example/bcd.iso", "--username", "root", "--password-file", str(tmp_path / "password"))
    machine = data(enrolled)
    assert isinstance(machine, dict) and machine["state"] == "enrolled" and machine["credentials_version"] == 1
    machine_id = machine["machine_id"]

    # Only the agent's key opens what the CLI sealed, and only for this machine.
    box = db.execute("SELECT key_id, box FROM compute.machine_credentials").fetchone()
    assert json.loads(keyring.open(box[0], bytes(box[1]), machine_id.encode()))["password"] == PASSWORD

    assert data(cli(relay, "manage", "--machine-id", machine_id))["state"] == "verifying"  # type: ignore[index]
    refused = cli(relay, "provide", "--machine-id", machine_id)
    assert refused.returncode == 1 and refused.stderr.startswith("INVALID_ARGUMENT: machine bm-01 is verifying")
    aborted = data(cli(relay, "abort", "--machine-id", machine_id, "--reason", "wrong rack"))
    assert aborted["state"] == "verify_failed"  # type: ignore[index]
    listed = data(cli(relay, "list", "--pool-id", str(pool)))
    assert [(m["name"], m["state"], m["quarantined"], m["last_error"]) for m in listed] == \
        [("bm-01", "verify_failed", True, "aborted: wrong rack")]  # type: ignore[union-attr]
    shown = cli(relay, "show", "--machine-id", machine_id)
    assert data(shown)["state"] == "verify_failed"  # type: ignore[index]  # no worker ran: no operation was issued
    decided = db.execute("SELECT action FROM compute.audit_events WHERE tenant_id = %s AND decision = 'allow' ORDER BY event_id",
                         (TENANT,)).fetchall()
    assert [action for (action,) in decided] == ["compute:machines:registerAgent", "compute:machines:enroll",
                                                 "compute:machines:manage", "compute:machines:abort"]

    dump = subprocess.run(["pg_dump", "--data-only", "--dbname", db_dsn], capture_output=True, text=True, check=True).stdout
    for text in (dump, enrolled.stdout, enrolled.stderr, shown.stdout, relay.log()):
        assert PASSWORD not in text
