"""`better-compute dev`: a private cluster that comes up once, survives a crash, and goes down."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from better_compute import embedded

CLI = [sys.executable, "-m", "better_compute.cli.main"]


def dev(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "dev", *args], cwd=workdir, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bc-dev-"))
    path.chmod(0o755)
    yield path
    dev(path, "down")
    embedded.Cluster.at(path / ".bc").destroy()
    shutil.rmtree(path, ignore_errors=True)


def test_dev_up_is_idempotent_and_psql_reads_the_clock(workdir: Path) -> None:
    first = dev(workdir, "up")
    assert first.returncode == 0, first.stderr
    assert "migrations applied: roles, schemas" in first.stdout
    assert "DSN: postgresql://" in first.stdout
    second = dev(workdir, "up")
    assert second.returncode == 0, second.stderr
    assert "none (up to date)" in second.stdout
    psql = dev(workdir, "psql", "-tA", "-c", "select compute.compute_now() is not null")
    assert (psql.returncode, psql.stdout.strip()) == (0, "t"), psql.stderr


def test_dev_status_and_down(workdir: Path) -> None:
    assert dev(workdir, "status").returncode == 1  # nothing there yet
    assert dev(workdir, "up").returncode == 0
    running = dev(workdir, "status")
    assert running.returncode == 0 and "[x] limits" in running.stdout
    assert dev(workdir, "down").returncode == 0
    stopped = dev(workdir, "status")
    assert stopped.returncode == 3 and "stopped" in stopped.stdout


def test_dev_up_recovers_from_a_killed_server(workdir: Path) -> None:
    assert dev(workdir, "up").returncode == 0
    cluster = embedded.Cluster.at(workdir / ".bc")
    pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)  # a crash: postmaster.pid stays behind
    assert (cluster.datadir / "postmaster.pid").exists()
    again = dev(workdir, "up")
    assert again.returncode == 0, again.stderr
    psql = dev(workdir, "psql", "-tA", "-c", "select count(*) from ops.limits")
    assert psql.returncode == 0 and int(psql.stdout) > 0, psql.stderr


def test_dev_up_keeps_data_where_the_server_user_can_reach_it(workdir: Path) -> None:
    assert dev(workdir, "up").returncode == 0
    cluster = embedded.Cluster.at(workdir / ".bc")
    assert (cluster.datadir / "PG_VERSION").exists()
    assert len(str(cluster.socketdir)) <= embedded.SOCKET_PATH_MAX
