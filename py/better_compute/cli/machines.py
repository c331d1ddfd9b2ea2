"""`better-compute machines`: bare metal through the API relay (docs/bare-metal.md), one IAM decision
per command like every relay command. The group's commands are generated from the method catalog
(machines.manage, machines.list, …: methods.py) except `enroll`: it seals the BMC credentials here,
to the site agent's public key (machines.agents) with the machine id as associated data, before
anything leaves this process; the relay, IAM and the database only ever see the box."""

from __future__ import annotations

import base64
import inspect
import json
import uuid
from pathlib import Path
from typing import Any

import typer

from better_compute.cli import options
from better_compute.cli.client import ApiError, Client
from better_compute.cli.options import OptionSpec
from better_compute.sealing import seal

app = typer.Typer(no_args_is_help=True, help="Bare-metal machines: register-agent, agents, enroll, manage, provide, release, "
                                             "retry, abort, list, show.")


def option(name: str, help: str, annotation: Any = str) -> OptionSpec:
    return OptionSpec(name, (f"--{name.replace('_', '-')}",), annotation, help, inspect.Parameter.empty)


ENROLL_OPTIONS = (
    option("agent_id", "The site agent that reaches the BMC (machines agents)."),
    option("pool_id", "The pool the machine's node joins."),
    option("name", "The machine's name."),
    option("bmc_address", "The BMC's Redfish base URL, e.g. https://10.0.0.7."),
    option("system_uuid", "The system's uuid (what the BMC must report)."),
    option("image_url", "The image (with bcd) the BMC boots as virtual media."),
    option("username", "BMC user name."),
    option("password_file", "A file holding the BMC password (never an argument).", Path),
)


def sealed_enrollment(client: Client, values: dict[str, Any], password: str) -> Any:
    """machines.enroll with the credentials sealed to the agent's key, bound to a new machine id."""
    agents = client.call("machines.agents", {"agent_id": values["agent_id"]}, mutation=False)
    if not agents:
        raise ApiError("NOT_FOUND", f"no site agent {values['agent_id']}", "List them: better-compute machines agents.")
    machine_id = str(uuid.uuid4())
    box = seal(base64.b64decode(agents[0]["public_key"]), json.dumps({"username": values["username"], "password": password}),
               aad=machine_id.encode())
    body = {key: values[key] for key in ("agent_id", "pool_id", "name", "bmc_address", "system_uuid", "image_url")}
    return client.call("machines.enroll", {**body, "machine_id": machine_id, "credentials_key_id": box.key_id,
                                           "credentials_box": base64.b64encode(box.box).decode()}, mutation=True)


def enroll(ctx: typer.Context, **values: Any) -> None:
    """Enroll a machine by its BMC; its credentials are sealed to the agent's key here."""
    given = options.collect(ctx, values)
    password = values["password_file"].read_text().rstrip("\n")
    options.run(given, lambda client: sealed_enrollment(client, values, password), ("machine_id",))


enroll.__signature__ = options.signature(ENROLL_OPTIONS, options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
app.command("enroll")(enroll)
