"""`better-compute machines` as a subprocess, as an operator (role bc_operator): register an agent,
enroll a machine (the password read from a file and sealed in the CLI: it is in no argument, no
output and no table), move it, list and show it; an illegal move is refused with the contract error."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

from better_compute.sealing import SecretKeyring
from fleet import H200_MODEL
from gateway_support import REPO

PASSWORD = "correct horse battery staple 14"


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "better_compute.cli.main", "machines", *arguments], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "py")})


def test_operator_enrolls_moves_lists_and_shows_a_machine(db: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    site = db.execute("SELECT compute.site_create('rack-cli')").fetchone()[0]
    pool = db.execute("SELECT compute.pool_create(%s, 'h200', %s)", (site, H200_MODEL)).fetchone()[0]
    db.commit()
    keyring = SecretKeyring(tmp_path / "agent.key")
    registered = cli("register-agent", "--dsn", db_dsn, "--site-id", str(site), "--name", "agent-1",
                     "--public-key", base64.b64encode(keyring.public_key).decode())
    assert registered.returncode == 0, registered.stderr
    agent = registered.stdout.strip()
    (tmp_path / "password").write_text(PASSWORD + "\n")
    enrolled = cli("enroll", "--dsn", db_dsn, "--agent-id", agent, "--pool-id", str(pool), "--name", "bm-01",
                   "--bmc-address", "https://10.0.0.7", "--system-uuid", "4c4c4544-0042-3010-8052-b4c04f4b4e32",
                   "--image-url", "http://images.example/bcd.iso", "--username", "root", "--password-file", str(tmp_path / "password"))
    assert enrolled.returncode == 0, enrolled.stderr
    machine = json.loads(enrolled.stdout)
    assert machine["state"] == "enrolled" and machine["credentials_version"] == 1

    # Only the agent's key opens what the CLI sealed, and only for this machine.
    box = db.execute("SELECT key_id, box FROM compute.machine_credentials").fetchone()
    assert json.loads(keyring.open(box[0], bytes(box[1]), machine["machine_id"].encode()))["password"] == PASSWORD

    assert json.loads(cli("manage", "--dsn", db_dsn, "bm-01").stdout)["state"] == "verifying"
    refused = cli("provide", "--dsn", db_dsn, "bm-01")
    assert refused.returncode != 0 and "INVALID_ARGUMENT" in refused.stdout + refused.stderr
    assert json.loads(cli("abort", "--dsn", db_dsn, "bm-01", "--reason", "wrong rack").stdout)["state"] == "verify_failed"
    listed = json.loads(cli("list", "--dsn", db_dsn).stdout)
    assert [(m["name"], m["state"], m["quarantined"], m["last_error"]) for m in listed] == \
        [("bm-01", "verify_failed", True, "aborted: wrong rack")]
    shown = cli("show", "--dsn", db_dsn, machine["machine_id"])
    assert json.loads(shown.stdout)["state"] == "verify_failed"  # no worker ran: no operation was issued

    dump = subprocess.run(["pg_dump", "--data-only", "--dbname", db_dsn], capture_output=True, text=True, check=True).stdout
    for text in (dump, enrolled.stdout, enrolled.stderr, shown.stdout):
        assert PASSWORD not in text
