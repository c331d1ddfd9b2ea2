"""`better-compute machines`: bare metal for operators (docs/bare-metal.md), straight to PostgreSQL as
a member of bc_operator through the `ops` functions. Credentials are sealed here, to the site
agent's public key with the machine id as associated data, before anything leaves this process."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from better_compute.db import Database
from better_compute.sealing import seal

app = typer.Typer(no_args_is_help=True, help="Bare-metal machines: enroll, manage, provide, release, retry, abort, list, show.")

OPERATOR_ROLE = "bc_operator"
DsnOption = Annotated[str, typer.Option("--dsn", envvar="BETTER_COMPUTE_DSN", help="libpq conninfo or URL (a bc_operator login).")]
MachineArgument = Annotated[str, typer.Argument(help="The machine's name or id.")]


def database(dsn: str) -> Database:
    return Database(dsn, max_size=1, name="better-compute-machines", role=OPERATOR_ROLE)


def show(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True, default=str))


@app.command("register-agent")
def register_agent(dsn: DsnOption,
                   site_id: Annotated[str, typer.Option(help="The site whose BMCs the agent reaches.")],
                   name: Annotated[str, typer.Option(help="The agent's name in its site.")],
                   public_key: Annotated[str, typer.Option(help="What `serve site-agent --print-public-key` printed.")]) -> None:
    """Register a site agent and the key BMC credentials are sealed to; prints its id."""
    with database(dsn) as db:
        typer.echo(db.call("ops.site_agent_register", uuid.UUID(site_id), name, base64.b64decode(public_key)))


@app.command("enroll")
def enroll(dsn: DsnOption,
           agent_id: Annotated[str, typer.Option(help="The site agent that reaches the BMC.")],
           pool_id: Annotated[str, typer.Option(help="The pool the machine's node joins.")],
           name: Annotated[str, typer.Option(help="The machine's name.")],
           bmc_address: Annotated[str, typer.Option(help="The BMC's Redfish base URL, e.g. https://10.0.0.7.")],
           system_uuid: Annotated[str, typer.Option(help="The system's uuid (what the BMC must report).")],
           image_url: Annotated[str, typer.Option(help="The image (with bcd) the BMC boots as virtual media.")],
           username: Annotated[str, typer.Option(help="BMC user name.")],
           password_file: Annotated[Path, typer.Option(help="A file holding the BMC password (never an argument).")]) -> None:
    """Enroll a machine by its BMC; its credentials are sealed to the agent's key here."""
    machine_id = uuid.uuid4()
    with database(dsn) as db:
        [agent] = db.rows("ops.site_agent_key", uuid.UUID(agent_id))
        box = seal(base64.b64decode(agent["public_key"]),
                   json.dumps({"username": username, "password": password_file.read_text().rstrip("\n")}),
                   aad=str(machine_id).encode())
        show(db.call("ops.machine_enroll", machine_id, uuid.UUID(agent_id), uuid.UUID(pool_id), name, bmc_address,
                     system_uuid, image_url, box.key_id, box.box))


def move(function: str) -> Any:
    def command(dsn: DsnOption, machine: MachineArgument) -> None:
        with database(dsn) as db:
            show(db.call(function, machine))
    return command


app.command("manage", help="enrolled / manageable -> verifying.")(move("ops.machine_manage"))
app.command("provide", help="manageable -> deploying (the machine joins its pool).")(move("ops.machine_provide"))
app.command("release", help="active -> cleaning (its node's key is revoked at once), then deployed again.")(move("ops.machine_release"))
app.command("retry", help="A failed (quarantined) state -> the state it failed in.")(move("ops.machine_retry"))


@app.command("abort")
def abort(dsn: DsnOption, machine: MachineArgument,
          reason: Annotated[str, typer.Option(help="Why (kept as the machine's last error).")] = "aborted by an operator") -> None:
    """In flight -> its failed state; a failed state -> enrolled / manageable."""
    with database(dsn) as db:
        show(db.call("ops.machine_abort", machine, reason))


@app.command("list")
def list_machines(dsn: DsnOption) -> None:
    """Every machine: state, quarantined, deadline, failures, BmcReachable, the live operation."""
    with database(dsn) as db:
        show(db.rows("ops.machines_list"))


@app.command("show")
def show_machine(dsn: DsnOption, machine: MachineArgument) -> None:
    """One machine and its last BMC operations."""
    with database(dsn) as db:
        show(db.call("ops.machine_show", machine))
