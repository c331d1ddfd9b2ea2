"""Packaging (docs/operations.md, "Installing"): the wheel `python -m build` makes installs in a fresh
virtual environment, runs `better-compute --version` and migrates a database with the migrations/
it carries; the systemd units verify against its commands and stay hardened; the
container definition copies only what exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway_support import REPO

UNITS = REPO / "deploy" / "systemd"
CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "README.md", "py", "sql", "migrations")
SERVE_UNITS = ("api", "gateway", "worker", "signer", "site-agent")
FIRST_CHANGES = "clock"  # migrated from the wheel's scripts (the whole plan is tests/test_migrations.py's)
EXPOSURE = {"better-compute@": 20, "bcd": 70}  # systemd-analyze security, 0 (locked down) to 100


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from a copy of the sources (no build/ left in the checkout).
    Its dependencies are the test venv's (a .pth names its site-packages, whose own .pth files, the
    editable install among them, are not read): better_compute itself comes from the wheel only."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, source / name)
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "dist"), "."], root / "src")
    [wheel] = (root / "dist").glob("better_compute-*.whl")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root)
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
         "--disable-pip-version-check", "--quiet", str(wheel)], root)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def clean_env(**more: str) -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")} | more


def test_the_wheel_runs_and_migrates_from_the_schema_it_carries(installed: Path, empty_database: Callable[[], str],
                                                                 tmp_path: Path) -> None:
    cli = str(installed / "bin" / "better-compute")
    version = run([cli, "--version"], tmp_path, clean_env())
    assert re.fullmatch(r"better-compute \d+\.\d+\.\d+\S*\n", version)
    where = run([str(installed / "bin" / "python"), "-c",
                 "import better_compute.migrate as m; print(m.SQL_DIR.is_dir(), m.MIGRATIONS_DIR)"], tmp_path, clean_env())
    assert where.startswith(f"True {installed}"), where  # the wheel's copy, not the checkout's
    dsn = empty_database()
    run([cli, "db", "migrate", "--to", FIRST_CHANGES], tmp_path, clean_env(BETTER_COMPUTE_DSN=dsn))
    status = run([cli, "db", "status"], tmp_path, clean_env(BETTER_COMPUTE_DSN=dsn)).splitlines()
    plan = (REPO / "migrations" / "sqitch.plan").read_text()
    changes = [line.split()[0] for line in plan.splitlines() if line[:1].isalpha()]
    assert [line[4:].split()[0] for line in status] == changes  # the whole plan, read from the wheel
    assert [line.startswith("[x]") for line in status] == [name in changes[:changes.index(FIRST_CHANGES) + 1]
                                                          for name in changes]
    assert run([str(installed / "bin" / "bcd"), "version"], tmp_path, clean_env()).strip()


def test_the_systemd_units_verify_and_are_hardened(installed: Path, tmp_path: Path) -> None:
    """systemd-analyze verify needs the commands to exist: the units are pointed at the fresh venv."""
    for unit in UNITS.glob("*.service"):
        text = unit.read_text().replace("/opt/better-compute", str(installed))
        names = [unit.name.replace("@.", f"@{name}.") for name in SERVE_UNITS] if "@." in unit.name else [unit.name]
        for name in names:
            (tmp_path / name).write_text(text)
    units = sorted(str(path) for path in tmp_path.glob("*.service"))
    assert len(units) == len(SERVE_UNITS) + 1
    run(["systemd-analyze", "verify", "--man=no", *units], tmp_path)
    for unit in units:
        threshold = next(value for prefix, value in EXPOSURE.items() if Path(unit).name.startswith(prefix))
        run(["systemd-analyze", "security", "--offline=yes", f"--threshold={threshold}", unit], tmp_path)
        lines = (line for line in Path(unit).read_text().splitlines() if "=" in line and not line.startswith("#"))
        settings = dict(line.split("=", 1) for line in lines)
        assert (settings["NoNewPrivileges"], settings["ProtectSystem"]) == ("yes", "strict"), unit
        assert settings["StateDirectory"] and settings["ReadOnlyPaths"], unit


def test_the_container_definition_copies_what_exists_and_has_both_images() -> None:
    text = CONTAINERFILE.read_text()
    assert {"control-plane", "bcd"} <= set(re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.MULTILINE))
    for line in re.findall(r"^COPY (?!--)(.+)$", text, flags=re.MULTILINE):
        *sources, _target = line.split()
        assert all((REPO / source).exists() for source in sources), line
