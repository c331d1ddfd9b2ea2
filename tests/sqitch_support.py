"""The real `sqitch` on our Sqitch project (migrations/), against a test database."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from better_compute import migrate
from better_compute.embedded import pg_bindir

_LIBPQ_ENVIRONMENT = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}


def sqitch_environment(dsn: str, home: Path) -> dict[str, str]:
    """Our environment less any PG*/SQITCH_* settings, then the database as libpq variables, a
    private HOME and no system sqitch.conf, and the psql of the server's version first on PATH."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SQITCH_"))}
    env.update({_LIBPQ_ENVIRONMENT[key]: str(value) for key, value in conninfo_to_dict(dsn).items()})
    env.update(HOME=str(home), SQITCH_SYSTEM_CONFIG=str(home / "no-system-sqitch.conf"),
               SQITCH_FULLNAME="Better Compute tests", SQITCH_EMAIL="tests@better-compute.invalid",
               PATH=f"{pg_bindir()}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


def _run(args: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sqitch", *args, "db:pg:"], cwd=migrate.MIGRATIONS_DIR, env=env, capture_output=True,
                          text=True, check=False, timeout=120)


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"{' '.join(map(str, done.args))} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def sqitch(*args: str, env: dict[str, str]) -> None:
    """Run `sqitch <args> db:pg:` in migrations/; fail the test, showing its output, unless it exits 0."""
    done = _run(args, env)
    assert done.returncode == 0, _output(done)


def sqitch_verify_failures(env: dict[str, str]) -> list[str]:
    """Run `sqitch verify`: the changes whose verify script failed, in plan order (it exits non-zero
    exactly when there are some)."""
    done = _run(("verify",), env)
    failed = re.findall(r'Verify script "verify/([^"]+)\.sql" failed', done.stdout)
    assert (done.returncode == 0) == (not failed), _output(done)
    return failed
