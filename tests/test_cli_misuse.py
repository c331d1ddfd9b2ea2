"""No traceback for any operator mistake (issue 17): thirty misuses of the CLI, each ends as one
`CODE: message` line (and a `Hint:`), exit 2 for a usage error and 1 for the rest. They run in this
process through the entry point's own error handling (cli/errors.py), so thirty cost no start-ups."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import typer.main

from better_compute.cli import app, errors
from better_compute.errors import ContractError
from sqitch_support import sqitch, sqitch_environment

NOWHERE_DSN = "host=/nonexistent-socket-dir dbname=bc user=bc connect_timeout=2"
URL = "http://127.0.0.1:9"  # nothing listens there
POOL = "22222222-2222-4222-8222-222222222222"
CREATE = ("reservations", "create", "--url", URL, "--pool-id", POOL, "--shape", "gpu", "--count", "1")

MISUSES: list[tuple[tuple[str, ...], int, str]] = [  # (arguments, exit status, what stderr starts with)
    (("sites", "list", "--url", URL, "--bogus"), 2, "USAGE_ERROR: No such option: --bogus"),
    (("sitez", "list"), 2, "USAGE_ERROR: No such command 'sitez'"),
    (("sites", "lst", "--url", URL), 2, "USAGE_ERROR: No such command 'lst'"),
    (("reservations", "create", "--url", URL), 2, "USAGE_ERROR: Missing option '--"),
    (CREATE, 2, "USAGE_ERROR: Invalid value for '--end': give --end (a time) or --for"),
    ((*CREATE, "--end", "2030-01-01T00:00:00Z", "--for", "2h"), 2, "USAGE_ERROR: Invalid value for '--for': give --end or --for"),
    ((*CREATE, "--for", "2"), 2, "USAGE_ERROR: Invalid value for '--for': '2' is not a duration"),
    ((*CREATE, "--for", "0h"), 2, "USAGE_ERROR: Invalid value for '--for': the duration must be longer than 0"),
    ((*CREATE, "--for", "2h", "--start", "tomorrow"), 2, "USAGE_ERROR: Invalid value for '--start': 'tomorrow' is not"),
    ((*CREATE, "--count", "two", "--for", "2h"), 2, "USAGE_ERROR: Invalid value for '--count'"),
    (("sites", "list", "--url", URL, "-o", "xml"), 2, "USAGE_ERROR: Invalid value for '--format'"),
    (("sites", "list", "--url", URL, "-o"), 2, "USAGE_ERROR: Option '-o' requires an argument"),
    (("sites", "list", "--url", URL, "--query", "a..b"), 2, "USAGE_ERROR: Invalid value for '--query'"),
    (("sites", "list", "--url", URL, "--profile", "nope"), 2, "USAGE_ERROR: Invalid value for '--profile': no profile 'nope'"),
    (("sites", "list"), 2, "USAGE_ERROR: Invalid value for '--url': no relay URL"),
    (("sites", "list", "--url", "ftp://x"), 2, "USAGE_ERROR: Invalid value for '--url'"),
    (("sites", "list", "--url", URL), 1, "CONNECTION_ERROR: cannot reach http://127.0.0.1:9"),
    (("events", "watch", "--url", URL, "--since", "yesterday"), 2, "USAGE_ERROR: Invalid value for '--since'"),
    (("events", "watch", "--url", URL, "--since", "now", "--after", "1:1"), 2, "USAGE_ERROR: Invalid value for '--since'"),
    (("nodes", "list", "--url", URL, "--watch", "--interval", "0"), 2, "USAGE_ERROR: Invalid value for '--interval'"),
    (("api", "sites", "--url", URL), 2, "USAGE_ERROR: Invalid value for METHOD"),
    (("api", "sites.create", "name", "--url", URL), 2, "USAGE_ERROR: Invalid value for PARAMS"),
    (("db", "migrate"), 2, "USAGE_ERROR: Missing option '--dsn'"),
    (("db", "migrate", "--dsn", NOWHERE_DSN), 1, "DATABASE_UNAVAILABLE: cannot use the database"),
    (("db", "status", "--dsn", "this is = not a dsn"), 1, "INVALID_ARGUMENT: not a database address"),
    (("db", "revert", "--dsn", NOWHERE_DSN, "--to", "nonexistent", "-y"), 1, "PLAN_ERROR: no change named 'nonexistent'"),
    (("db", "migrate", "--dsn", NOWHERE_DSN, "--to", "@v9.9.9"), 1, "PLAN_ERROR: no tag '@v9.9.9'"),
    (("db", "revert", "--dsn", NOWHERE_DSN), 1, "ABORTED: nothing was done"),  # no -y, and no terminal to answer
    (("db", "regenerate", "no_such_change"), 1, "no change named 'no_such_change'"),
    (("profile", "show", "nope"), 1, "no profile 'nope'"),
    (("profile", "save", "--name", "bad name!", "--url", URL), 2, "USAGE_ERROR: Invalid value for '--name'"),
    (("audit", "verify", "/nonexistent/export.json"), 2, "USAGE_ERROR: Invalid value: cannot read /nonexistent/export.json"),
    (("fleet", "apply", "--url", URL, "-f", "/nonexistent/fleet.yaml"), 2, "USAGE_ERROR: Invalid value for"),
    (("serve", "api", "--port", "eighty"), 2, "USAGE_ERROR: Invalid value for '--port'"),
]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run the CLI in this process as its entry point does: (exit status, stdout, stderr)."""
    for name in ("BETTER_COMPUTE_URL", "BETTER_COMPUTE_TOKEN", "BETTER_COMPUTE_TENANT", "BETTER_COMPUTE_PROFILE",
                 "BETTER_COMPUTE_DSN", errors.DEBUG):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115 (closed with the test's process)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as ended:
            errors.run(typer.main.get_command(app), list(args))
        out, err = capsys.readouterr()
        return int(ended.value.code or 0), out, err
    return run


def test_thirty_misuses_end_in_a_code_and_never_a_traceback(cli: Callable[..., tuple[int, str, str]]) -> None:
    assert len(MISUSES) >= 30
    failures = []
    for args, status, start in MISUSES:
        code, _, err = cli(*args)
        if code != status or start not in err.splitlines()[0] or "Traceback" in err or len(err.splitlines()) > 2:
            failures.append(f"{' '.join(args)}: exit {code}\n{err}")
    assert failures == [], "\n".join(failures)


def test_usage_errors_have_a_hint_that_names_the_commands_help(cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = cli("sites", "list", "--url", URL, "--bogus")
    assert code == 2 and err.splitlines()[1] == "Hint: `better-compute sites list --help` shows the options and arguments."


@pytest.mark.skipif(shutil.which("sqitch") is None, reason="the sqitch CLI is not installed (apt-get install sqitch)")
def test_db_refuses_a_database_that_sqitch_deployed(cli: Callable[..., tuple[int, str, str]], empty_database: Callable[[], str],
                                                    tmp_path: Path) -> None:
    dsn = empty_database()
    sqitch("deploy", "--to", "schemas", env=sqitch_environment(dsn, tmp_path))
    for command in ("migrate", "status", "revert"):
        code, out, err = cli("db", command, "--dsn", dsn, "-y")if command == "revert" else cli("db", command, "--dsn", dsn)
        assert (code, out) == (1, ""), err
        assert err.startswith("SQITCH_REGISTRY: this database was deployed by Sqitch"), err
        assert "Hint: Keep using Sqitch on this database" in err and "Traceback" not in err


def test_a_contract_error_from_the_database_is_its_code(cli: Callable[..., tuple[int, str, str]], db_dsn: str) -> None:
    """A ContractError raised through a context manager (it is a frozen dataclass, so contextlib
    cannot set its traceback) still ends as its own code, not INTERNAL_ERROR."""

    @contextmanager
    def scope() -> Iterator[None]:
        yield

    with pytest.raises(BaseException) as raised, scope():
        raise ContractError("NOT_FOUND", "no machine m-1", "ops.machines lists them.", 404)
    assert errors.explain(raised.value) == ("NOT_FOUND", "no machine m-1", "ops.machines lists them.")
    code, _, err = cli("db", "revert", "--dsn", db_dsn, "--to", "nonexistent", "-y")
    assert code == 1 and err.startswith("PLAN_ERROR: no change named 'nonexistent' in the plan"), err
