"""How the CLI ends: every mistake an operator can make is one `CODE: message` line (and a `Hint:`
line) on stderr, never a traceback. Usage errors (an unknown option, a bad value, a missing input)
exit 2, the rest 1. An error no rule here knows is a bug: INTERNAL_ERROR, with the traceback only
when BETTER_COMPUTE_DEBUG is set."""

from __future__ import annotations

import os
import sys
from dataclasses import FrozenInstanceError
from typing import NoReturn

import typer
from typer._click import exceptions as click  # the click that typer vendors (and raises)
from typer._click.core import Command
from typer._click.utils import echo

DEBUG = "BETTER_COMPUTE_DEBUG"
DSN_HINT = "Check --dsn (or BETTER_COMPUTE_DSN): a libpq conninfo or postgresql:// URL of a running server."


def explain(error: BaseException) -> tuple[str, str, str | None]:
    """(code, message, hint) of an error raised by a command; the modules are looked up only if
    already loaded, so that start-up imports none of them."""
    if isinstance(error, FrozenInstanceError) and error.__context__ is not None:
        # A ContractError (a frozen dataclass) raised through a @contextmanager: contextlib's
        # attempt to set its __traceback__ raised this instead. The error meant is the context.
        return explain(error.__context__)
    message = " ".join(str(error).split()) or type(error).__name__
    contract = sys.modules.get("better_compute.errors")
    if contract is not None and isinstance(error, contract.ContractError):
        return error.code, error.message, error.hint
    migrate = sys.modules.get("better_compute.migrate")
    if migrate is not None and isinstance(error, migrate.SqitchRegistryError):
        return ("SQITCH_REGISTRY", message,
                "Keep using Sqitch on this database (sqitch deploy | revert | status | verify db:pg://… in migrations/); "
                "`better-compute db` is for databases it deployed itself (docs/migrations.md).")
    if migrate is not None and isinstance(error, migrate.PlanError):
        return ("PLAN_ERROR", message, "`better-compute db status --dsn …` lists the changes; a tag is written @v0.4.0.")
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(error, psycopg.OperationalError):
        return "DATABASE_UNAVAILABLE", f"cannot use the database: {message}", DSN_HINT
    if psycopg is not None and isinstance(error, psycopg.ProgrammingError) and error.sqlstate is None:  # libpq's parse
        return "INVALID_ARGUMENT", f"not a database address: {message}", DSN_HINT
    if psycopg is not None and isinstance(error, psycopg.Error):
        state = getattr(error, "sqlstate", None)
        return "DATABASE_ERROR", (f"{state}: " if state else "") + message, None
    if isinstance(error, FileNotFoundError):
        return "NOT_FOUND", message, None
    if isinstance(error, PermissionError):
        return "ACCESS_DENIED", message, None
    if isinstance(error, OSError):
        return "OS_ERROR", message, None
    return ("INTERNAL_ERROR", f"{type(error).__name__}: {message}",
            f"This is a bug in better-compute: run again with {DEBUG}=1 for the traceback, and report it.")


def say(code: str, message: str, hint: str | None) -> None:
    echo(f"{code}: {message}", err=True)
    if hint:
        echo(f"Hint: {hint}", err=True)


def usage_hint(error: click.UsageError) -> str:
    path = error.ctx.command_path if error.ctx is not None else "better-compute"
    return f"`{path} --help` shows the options and arguments."


def run(command: Command, args: list[str] | None = None) -> NoReturn:
    """Run the CLI and exit with its status."""
    try:
        status = command.main(args=args, prog_name="better-compute", standalone_mode=False)
    except click.NoArgsIsHelpError as error:  # a group without a command: its help, as click shows it
        echo(error.ctx.get_help() if error.ctx is not None else error.format_message(), err=True)
        sys.exit(2)
    except click.UsageError as error:
        say("USAGE_ERROR", error.format_message(), usage_hint(error))
        sys.exit(2)
    except click.ClickException as error:
        say("ERROR", error.format_message(), None)
        sys.exit(error.exit_code)
    except typer.Abort:
        say("ABORTED", "nothing was done", None)
        sys.exit(1)
    except KeyboardInterrupt:
        say("INTERRUPTED", "stopped by Ctrl-C", None)
        sys.exit(130)
    except Exception as error:  # the last resort: an operator's mistake never shows a traceback
        if os.environ.get(DEBUG):
            raise
        say(*explain(error))
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)
